"""`python -m hadw.integrations.verl`: fail loudly, before a long launch, if verl cannot see grpo_hadw."""

from hadw.integrations.verl import check_registered

print(check_registered())
