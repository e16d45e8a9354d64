"""Formats: the vocabulary of the model files Kilobyte reads and writes, below every stage that uses it.

`tflite_schema` holds the facts of the TFLite flatbuffer schema (builtin operators, tensor types, options tables,
padding rules, tensor naming) shared by the `.tflite` reader (`frontends/`), the writer (`export/`) and the TFLite
Micro bridge (`targets/tflm.py`); it lives here rather than in either of them so that neither imports the other.
`project` holds a compiled project's interface (its `kilobyte.json` manifest, the entry points' C names and calls),
written by `codegen/` and read by `targets/`, the driver and the host model. Nothing is imported here: the schema
needs the optional `tflite` package.
"""
