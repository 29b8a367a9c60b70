"""Dataset files: every benchmark loads with the right rows and answers; bad rows and options raise
DatasetError naming the file, line/row and field; JSONL, parquet and HF datasets all go through layouts."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hadw.data import (
    BENCHMARKS,
    DatasetError,
    FieldMap,
    Problem,
    last_boxed,
    load_benchmark,
    load_dataset_file,
    render_prompt,
)

EXPECTED_ROWS = {
    "math500": 500,
    "aime25": 30,
    "amc23": 40,
    "minerva_math": 272,
    "olympiadbench": 675,
    "gsm8k": 1319,
    "math_train": 7500,
}


@pytest.mark.parametrize("name", list(EXPECTED_ROWS))
def test_benchmark_loads_with_row_count_and_unique_uids(shared_data, name):
    problems = load_benchmark(name, shared_data)
    assert len(problems) == EXPECTED_ROWS[name]
    assert len({p.uid for p in problems}) == len(problems)
    assert all(p.source == name and p.uid.startswith(f"{name}:") for p in problems)
    assert all(isinstance(p.answer, str) and isinstance(p.question, str) and p.question for p in problems)


def test_benchmark_answers_match_the_readme(shared_data):
    math500 = load_benchmark("math500", shared_data)
    assert math500[0].uid == "math500:test/precalculus/807.json"
    assert math500[0].answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert sorted({p.level for p in math500}) == [1, 2, 3, 4, 5]
    assert sum(p.level == 5 for p in math500) == 134
    assert load_benchmark("aime25", shared_data)[19].answer == "336^\\circ"
    amc = load_benchmark("amc23", shared_data)
    assert amc[0].answer == "27" and all("." not in p.answer for p in amc)
    assert load_benchmark("minerva_math", shared_data)[0].answer == "1.6"
    olympiad = load_benchmark("olympiadbench", shared_data)
    assert olympiad[0].uid == "olympiadbench:1606"
    assert not any("$" in p.answer for p in olympiad)
    assert "69,84" in {p.answer for p in olympiad}  # "$69$,$84$" in the file
    gsm = load_benchmark("gsm8k", shared_data)
    assert gsm[0].answer == "18" and all("," not in p.answer for p in gsm)
    assert sum(p.answer.startswith("-") for p in gsm) == 2  # README: two negative answers


def test_verl_parquet_question_has_the_instruction_stripped(shared_data):
    problem = load_benchmark("math_train", shared_data, limit=2)[1]
    assert problem.answer == "98" and problem.uid == "math_train:1"
    assert problem.question.endswith("What is the largest number of members the band could have?")
    row = pq.read_table(shared_data / "math_train/train.parquet").slice(1, 1).to_pylist()[0]
    assert render_prompt(problem, "verl") == row["prompt"][0]["content"]


def test_auto_layout_detects_each_benchmark_from_its_folder_or_keys(shared_data, tmp_path):
    for name, relative in BENCHMARKS.items():
        problems = load_dataset_file(shared_data / relative, limit=3)
        assert problems == load_benchmark(name, shared_data, limit=3)
    # Outside a benchmark folder, the keys decide the fields (a MATH500 row has math500's), and the file
    # names the source: a copy is labelled after its own name, never after the layout it resembles.
    row = json.loads((shared_data / "math500/test.jsonl").read_text().splitlines()[0])
    (tmp_path / "x.jsonl").write_text(json.dumps(row) + "\n")
    assert load_dataset_file(tmp_path / "x.jsonl")[0].uid == "x:test/precalculus/807.json"
    (tmp_path / "my_quiz.jsonl").write_text((shared_data / "aime25/test.jsonl").read_text())
    assert {p.source for p in load_dataset_file(tmp_path / "my_quiz.jsonl")} == {"my_quiz"}


def _write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_math_layout_takes_the_last_boxed_and_parses_the_level(tmp_path):
    path = _write_jsonl(
        tmp_path / "train.jsonl",
        [
            {"problem": "Q1", "solution": "so \\boxed{2} then \\boxed{\\frac{1}{2}}.", "level": "Level 3", "type": "A"},
            {"problem": "Q2", "solution": "\\boxed 5$", "level": "Level ?", "type": "A"},
        ],
    )
    problems = load_dataset_file(path, layout="math")
    assert problems == [
        Problem("Q1", "\\frac{1}{2}", 3, "train", "train:0"),  # the source is the file, not the layout
        Problem("Q2", "5", "Level ?", "train", "train:1"),
    ]


def test_custom_field_map_with_nested_field_and_answer_function(tmp_path):
    path = _write_jsonl(tmp_path / "mine.jsonl", [{"q": "1+1", "meta": {"sol": "#### 2", "id": "a"}}])
    fields = FieldMap(question="q", answer="meta.sol", uid="meta.id", answer_fn=lambda s: s.split()[-1])
    assert load_dataset_file(path, layout=fields) == [Problem("1+1", "2", None, "mine", "mine:a")]


def test_missing_field_names_file_line_field_and_present_fields(tmp_path):
    path = _write_jsonl(
        tmp_path / "gsm.jsonl",
        [
            {"question": "a", "answer": "#### 1"},
            "",  # blank lines are skipped but still counted
            {"question": "b", "answr": "#### 2"},
        ],
    )
    with pytest.raises(DatasetError) as info:
        load_dataset_file(path, layout="gsm8k")
    assert str(info.value) == f"{path}:3: missing field 'answer' (the row has: ['answr', 'question'])"


def test_bad_json_names_file_and_line(tmp_path):
    path = _write_jsonl(tmp_path / "bad.jsonl", [{"problem": "a", "answer": "1"}, '{"problem": "b", "answer": '])
    with pytest.raises(DatasetError, match=rf"^{path}:2: bad JSON: Expecting value \(column 28\)$"):
        load_dataset_file(path)


def test_bad_answer_value_names_the_problem(tmp_path):
    path = _write_jsonl(tmp_path / "gsm.jsonl", [{"question": "a", "answer": "no hashes here"}])
    with pytest.raises(DatasetError, match=rf"^{path}:1: no '#### N' answer in the rationale$"):
        load_dataset_file(path, layout="gsm8k")


def test_bad_parquet_row_names_file_and_row(tmp_path):
    path = tmp_path / "train.parquet"
    rows = [
        {"prompt": [{"role": "user", "content": f"Q{i}"}], "reward_model": {"ground_truth": str(i)}} for i in range(3)
    ]
    rows[2]["reward_model"] = {"style": "rule"}
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(DatasetError) as info:
        load_dataset_file(path, layout="verl")
    assert str(info.value) == (f"{path}: row 2 (0-based): missing field 'reward_model.ground_truth' (it is null)")
    assert [p.answer for p in load_dataset_file(path, layout="verl", limit=2)] == ["0", "1"]


def test_unknown_layout_benchmark_and_undetectable_rows_list_the_allowed_values(tmp_path, shared_data):
    path = _write_jsonl(tmp_path / "x.jsonl", [{"text": "a", "label": 1}])
    with pytest.raises(DatasetError, match=r"unknown layout 'mat'; allowed: auto, verl, olympiadbench, math500, math,"):
        load_dataset_file(path, layout="mat")
    with pytest.raises(DatasetError, match=r"cannot detect the layout of a row with fields \['label', 'text'\]"):
        load_dataset_file(path)
    with pytest.raises(DatasetError, match=r"unknown benchmark 'aime24'; allowed: math500, aime25,"):
        load_benchmark("aime24", shared_data)
    with pytest.raises(DatasetError, match=r"unknown file type '.csv'"):
        (tmp_path / "x.csv").write_text("a,b\n")
        load_dataset_file(tmp_path / "x.csv")


def test_hf_datasets_save_to_disk_directory(tmp_path):
    import datasets

    data = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list([{"problem": "P", "solution": "\\boxed{7}", "level": "Level 2"}]),
            "test": datasets.Dataset.from_list([{"problem": "T", "solution": "x \\boxed{-1}", "level": "Level 5"}]),
        }
    )
    data.save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(DatasetError, match=r"holds splits \['train', 'test'\]; pass split="):
        load_dataset_file(tmp_path / "ds")
    assert load_dataset_file(tmp_path / "ds", split="test") == [Problem("T", "-1", 5, "ds", "ds:0")]
    data["train"].save_to_disk(str(tmp_path / "one"))
    assert load_dataset_file(tmp_path / "one", layout="math")[0].answer == "7"


def test_hf_local_dataset_folder_of_data_files(tmp_path):
    folder = tmp_path / "my_gsm"
    folder.mkdir()
    _write_jsonl(folder / "test.jsonl", [{"question": "q", "answer": "so #### 1,234"}])
    assert load_dataset_file(folder) == [Problem("q", "1234", None, "my_gsm", "my_gsm:0")]


def test_last_boxed_handles_nesting_and_truncation():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{a}{\\sqrt{b}}} c") == "\\frac{a}{\\sqrt{b}}"
    assert last_boxed("\\boxed{1} and \\boxed{\\frac{1}{2") is None  # truncated last box
    assert last_boxed("no box") is None
    assert last_boxed("\\fbox{3}") == "3"
