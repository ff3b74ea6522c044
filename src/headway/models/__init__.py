"""Model artifacts: import a checkpoint, build its ONNX graph, store it by content hash.

- ``importer``: checkpoint directory -> stored artifact (and int8 quantization).
- ``folder``: what a Hugging Face / sentence-transformers folder says (kind, pooling, ...).
- ``intake``: a folder or an ONNX graph in, an artifact out (the one entry for both).
- ``graphs``: encoder weights -> ONNX graph, built with numpy and ``onnx.helper``.
- ``tokenizer``: the artifact's tokenizer, padding off and truncation on.
- ``store``: the content-addressed, read-only artifact store.
- ``manifest``: what an artifact is (kind, name, dimensions, max tokens, ...).
- ``evaluate``: how far one embedding model drifts from another.

Nothing here imports torch; serving needs only onnxruntime, tokenizers and numpy.
"""
