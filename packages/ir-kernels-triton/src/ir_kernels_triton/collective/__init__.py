"""The all-reduce + norm composites over torch symmetric memory (`allreduce_norm`)."""
