#!/usr/bin/env python3
"""Open-ended chat transcripts for training a draft head (`ferrox spec-data --special`, then
`scripts/train_draft_head.py`): prompts made from templates x topics (deterministic; none from
`bench spec`'s control set), each answered greedily by a running ferrox server (OpenAI route),
written as ChatML with Qwen2.5's default system prompt.

Usage: draft_head_answers.py --url http://127.0.0.1:8080 --model NAME --out FILE
       [--prompts 400] [--parallel 6] [--max-tokens 320]
Standard library only.
"""

import argparse
import concurrent.futures as cf
import json
import random
import urllib.request

topics = ["volcanoes", "the printing press", "photosynthesis", "bread baking", "chess openings",
 "electric cars", "the Roman Empire", "honey bees", "black holes", "jazz music", "recycling plastic",
 "public libraries", "the human heart", "mountain hiking", "solar panels", "ancient Egypt",
 "machine learning", "coral reefs", "the stock market", "learning a language", "sleep",
 "coffee farming", "the internet", "earthquakes", "vaccines", "the moon landing", "wind power",
 "octopuses", "urban gardening", "the French Revolution", "rainforests", "credit cards",
 "meditation", "bicycles", "glaciers", "the violin", "compilers", "databases", "version control",
 "operating systems", "cryptography", "weather forecasting", "tea ceremonies", "marathons",
 "origami", "submarines", "the periodic table", "birds migrating", "board games", "podcasts",
 "remote work", "desert plants", "the Silk Road", "clocks", "bridges", "antibiotics", "pizza",
 "the Olympic games", "telescopes", "rivers", "cloud computing", "unit testing", "recursion",
 "sorting algorithms", "spreadsheets", "budgeting", "job interviews", "friendship", "museums"]
templates = [
 "Explain {t} to a curious twelve-year-old.",
 "Write a short story in which {t} play an unexpected role.",
 "Give me five surprising facts about {t}, each with a sentence of explanation.",
 "Write a friendly e-mail to a colleague suggesting a team outing themed around {t}.",
 "What are the main advantages and disadvantages of {t}? Answer in a few paragraphs.",
 "Write a short poem about {t}.",
 "Summarise the history of {t} in about two hundred words.",
 "I am giving a five-minute talk about {t}. Draft an outline with an opening line.",
 "Describe a day in the life of someone whose work revolves around {t}.",
 "What common misconceptions do people have about {t}, and what is actually true?",
 "Write a product description for an imaginary gadget inspired by {t}.",
 "Answer step by step: how would you teach a beginner the basics of {t}?",
]
SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def prompts(n):
    pairs = [(tp, t) for tp in templates for t in topics]
    random.Random(7).shuffle(pairs)
    return [tp.format(t=t) for tp, t in pairs[:n]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts", type=int, default=400)
    ap.add_argument("--parallel", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=320)
    a = ap.parse_args()

    def ask(p):
        body = {"model": a.model, "messages": [{"role": "user", "content": p}], "max_tokens": a.max_tokens, "temperature": 0}
        req = urllib.request.Request(a.url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=3600) as r:
            return p, json.load(r)["choices"][0]["message"]["content"]

    with open(a.out, "w") as f, cf.ThreadPoolExecutor(a.parallel) as ex:
        for n, (p, answer) in enumerate(ex.map(ask, prompts(a.prompts)), 1):
            f.write(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n")
            f.flush()
            if n % 20 == 0:
                print(f"{n} answered", flush=True)


if __name__ == "__main__":
    main()
