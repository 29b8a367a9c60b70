"""The rollout options' allowed values, importable without torch: config validation (`hadw train`'s parent
process, which only launches the engine=trl workers) checks them before anything heavy is loaded."""

DECODERS = ("auto", "fused", "graph", "hf")  # rollout.decoder's values (hadw.rollout.engine implements them)
COMPUTE_DTYPES = ("float32", "bfloat16", "auto")  # model.compute_dtype's values (hadw.rollout.precision)
