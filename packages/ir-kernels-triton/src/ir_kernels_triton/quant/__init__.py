"""fp8 quantization: the conversion and scale helpers every kernel shares (`fp8`), and static
(`static`), dynamic per-token (`dynamic`) and group (`group`) quantization."""
