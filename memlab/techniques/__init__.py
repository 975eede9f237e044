"""Built-in techniques, one family per module; every module here is imported on discovery."""
