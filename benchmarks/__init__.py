"""asv benchmarks of memlab: one module per technique family, one class per workload.

Run them with asv (see benchmarks/README.md); ``common`` holds the shared machinery.
"""
