"""A provider whose import fails, as a missing native library would."""

raise ImportError("libfancykernels.so: cannot open shared object file")
