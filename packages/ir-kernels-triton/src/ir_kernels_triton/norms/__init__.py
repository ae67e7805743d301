"""The RMS-norm kernels: the one-program kernel and its launcher (`kernel`), the rows spread
over a cluster (`cluster_kernel`) and the launch rules (`rules`)."""
