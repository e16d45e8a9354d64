"""Targets stage: what the generated code runs on — the device catalogue, the TFLite Micro bridge, toolchains."""
