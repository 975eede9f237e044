"""Built-in workloads, one module each; every module here is imported on discovery."""
