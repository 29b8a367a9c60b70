"""The benchmark models, by name -> `hadw.rollout.build_tiny_model` kwargs (one home for roofline.py and
rollout_vs_ref.py; imports nothing from hadw, so a child process can load it beside any hadw revision).

"tiny" is the CPU demo/test model (~0.82 M parameters); "5.6M" a ~5.6 M model with GQA groups of 2.
"""

MODELS = {
    "tiny": dict(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=384),
    "5.6M": dict(hidden_size=256, num_layers=8, num_heads=8, num_kv_heads=4, intermediate_size=640),
}
