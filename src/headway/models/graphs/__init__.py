"""ONNX graphs built from a checkpoint's weights with numpy and ``onnx.helper``: the
encoder families (``encoders``), their heads (``heads``), the shared pieces (``builder``)."""
