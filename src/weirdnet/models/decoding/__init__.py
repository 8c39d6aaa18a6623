"""Decoding: the loop shared by the language model and the encoder–decoder
(:mod:`.generation`), choosing the next token (:mod:`.sampling`), the fused CPU step
(:mod:`.fused_decode`) and CUDA-graph decoding (:mod:`.graph_decode`).  Each drives a
backbone through its one decoding hook, ``Backbone.step``."""
