"""The benchmark models, by name -> `hadw.rollout.build_tiny_model` kwargs (one home for roofline.py and
rollout_vs_ref.py; imports nothing from hadw, so a child process can load it beside any hadw revision).

"tiny" is the CPU demo/test model (~0.82 M parameters); "5.6M" a ~5.6 M model with GQA groups of 2;
"135M" SmolLM2-135M's shapes (Llama, 30 layers, GQA 9/3, a 49 152-row tied embedding and head) with random
weights and the tiny byte tokenizer: a real model's cost without a download.
"""

MODELS = {
    "tiny": dict(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=384),
    "5.6M": dict(hidden_size=256, num_layers=8, num_heads=8, num_kv_heads=4, intermediate_size=640),
    "135M": dict(
        arch="llama",
        hidden_size=576,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        intermediate_size=1536,
        max_position_embeddings=2048,
        vocab_size=49152,
    ),
}
