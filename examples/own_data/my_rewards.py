"""A reward written for TRL: it names its own gold column (`gold`), as in `GRPOTrainer(reward_funcs=[...])`.

hadw train ... 'reward.functions=[my_rewards:gold_last_number]'   # run from this folder
"""

import re

_NUMBER = re.compile(r"-?\d+")


def gold_last_number(prompts, completions, gold, **kwargs) -> list[float]:
    """1.0 when the last integer in the completion equals the row's `gold`, else 0.0."""
    scores = []
    for completion, answer in zip(completions, gold, strict=True):
        text = completion if isinstance(completion, str) else completion[-1]["content"]  # conversational data
        numbers = _NUMBER.findall(text.replace(",", ""))
        scores.append(1.0 if numbers and int(numbers[-1]) == int(answer) else 0.0)
    return scores
