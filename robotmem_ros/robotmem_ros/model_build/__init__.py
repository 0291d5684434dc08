"""
Build-time tools for the embedding models (not loaded by the node, the client or the CLI).

``python -m robotmem_ros.model_build.quantize`` builds the default model at setup time.
"""
