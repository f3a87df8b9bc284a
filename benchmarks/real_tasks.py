"""The three task families the real pair is measured on (`make measure-real`, `make measure-real-self`), as prompts
(token ids) for a tokenizer or a tiny vocab.

code   continue a Python module (free generation in a familiar register: a draft model guesses well, lookup less)
prose  write English prose (no copying: lookup's proposals are mostly wrong)
edit   rename and rewrite a given function (input-grounded: most of the answer copies the prompt, lookup's home)
The chat tasks go through the tokenizer's chat template (the pair is instruction-tuned); code is raw text.
"""
from __future__ import annotations

import torch

from specdec_lib._checks import check_choice, check_int
from specdec_lib.lab.corpus import corpus
from specdec_lib.lab.ngram import build_sparse_ngram

__all__ = ["TASKS", "task_text", "task_prompt", "tiny_task_prompt", "token_table"]

TASKS = ("code", "prose", "edit")

_CODE = '''import heapq
from dataclasses import dataclass, field


@dataclass(order=True)
class Job:
    """A unit of work with a priority; lower numbers run first."""

    priority: int
    name: str = field(compare=False)
    retries: int = field(default=0, compare=False)


class Scheduler:
    """Runs jobs in priority order, retrying each failed job up to max_retries times."""

    def __init__(self, max_retries: int = 3):
        self.max_retries = max_retries
        self.queue: list[Job] = []
        self.done: list[str] = []
        self.failed: list[str] = []

    def submit(self, job: Job) -> None:
        """Queue a job."""
        heapq.heappush(self.queue, job)

    def run(self, work) -> None:
        """Pop jobs until the queue is empty; work(job) returns True on success."""
'''

_PROSE = ("Write a short story, about four paragraphs, about a lighthouse keeper on a remote island who finds a "
          "message in a bottle from a child on the other side of the ocean. Describe the weather, the island and "
          "the keeper's daily routine, and end with the keeper writing a reply.")

_EDIT_CODE = '''def proc(d, k, t):
    r = []
    for x in d:
        if x["kind"] == k and x["time"] >= t:
            v = x["value"]
            if v is None:
                continue
            r.append((x["time"], x["name"], v))
    r.sort()
    s = 0
    n = 0
    for tm, nm, v in r:
        s += v
        n += 1
    if n == 0:
        return None, r
    return s / n, r


def summary(d, k, t):
    m, r = proc(d, k, t)
    if m is None:
        print("no records of kind", k, "since", t)
        return
    print("kind", k, "since", t, ":", len(r), "records, mean", m)
    for tm, nm, v in r:
        print(" ", tm, nm, v)
'''

_EDIT = ("Rename the function proc to mean_since and its arguments d, k, t to records, kind, since; rename the "
         "local variables to descriptive names (r to selected, s to total, n to count, v to value, x to record, "
         "tm to time, nm to name, m to mean) in both functions. Keep the logic exactly the same and reply with "
         "the complete rewritten code only.\n\n```python\n" + _EDIT_CODE + "```")


def task_text(task: str) -> str:
    """The task's text: the code to continue, or the user's message of a chat task."""
    return {"code": _CODE, "prose": _PROSE, "edit": _EDIT}[check_choice("task", task, TASKS)]


def task_prompt(task: str, tokenizer) -> torch.Tensor:
    """The task's prompt as token ids (LongTensor (L,)): raw code, or a chat turn through the chat template."""
    text = task_text(task)
    if task == "code":
        ids = tokenizer(text)["input_ids"]
    else:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def tiny_task_prompt(task: str, vocab: int, *, length: int = 24, seed: int = 0) -> torch.Tensor:
    """A stand-in prompt over a tiny vocabulary (tests, `--tiny`): random ids; edit repeats itself (lookup finds it)."""
    task = check_choice("task", task, TASKS)
    vocab, length = check_int("vocab", vocab, minimum=2), check_int("length", length, minimum=2)
    g = torch.Generator().manual_seed(check_int("seed", seed, minimum=0) + TASKS.index(task))
    ids = torch.randint(0, vocab, (length,), generator=g)
    return torch.cat([ids, ids[: length // 2]]) if task == "edit" else ids


def token_table(tokenizer, vocab: int, *, max_bytes: int = 2_000_000, order: int = 3):
    """A tokenizer's table draft: the sparse n-gram table of the lab's training corpus (first max_bytes), tokenized."""
    text = bytes(corpus("train")[:check_int("max_bytes", max_bytes, minimum=1)].tolist()).decode("utf-8", "ignore")
    ids = torch.tensor(tokenizer(text)["input_ids"], dtype=torch.long)
    return build_sparse_ngram(ids, vocab, order)
