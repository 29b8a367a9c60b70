# Sourced by the scripts: model hubs are never contacted.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
# The project's development and CI machines keep the curated benchmark files in a data folder beside the
# checkout; a user's clone has none, and the tests that read them skip with the reason.
export HADW_SHARED_DATA=${HADW_SHARED_DATA:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/data}
