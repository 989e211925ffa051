"""kiln.ops: the kernel library (filled in below)."""
