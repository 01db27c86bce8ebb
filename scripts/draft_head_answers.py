#!/usr/bin/env python3
"""Open-ended chat transcripts for training a draft head (`ferrox spec-data --special`, then
`scripts/train_draft_head.py`): prompts made from templates x topics (deterministic; none from
`bench spec`'s control set), each answered greedily by a running ferrox server (OpenAI route),
written as ChatML with Qwen2.5's default system prompt.

Usage: draft_head_answers.py --url http://127.0.0.1:8080 --model NAME --out FILE
       [--pool first|wide] [--prompts 400] [--skip 0] [--parallel 6] [--max-tokens 320]
`--pool wide` draws from the templates and topics added after the first pool (every pairing
with a new template or a new topic), so its prompts never repeat the first pool's.
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
# The wide pool: other kinds of answers (letters, dialogues, lists, comparisons, advice, how-tos,
# reviews, plans) and other subjects. Nothing from `bench spec`'s control set or the held-out
# prompts (lighthouses, the sky's colour, coffee-shop names, trains and planes, hash maps; a
# sailor's letter, cats purring, Lisbon, adopting a dog, tides, a football speech).
more_topics = ["sourdough starters", "electric guitars", "the water cycle", "airline pricing",
 "tax returns", "houseplants", "the Great Wall of China", "wolves", "3D printing", "quantum computers",
 "the Renaissance", "bread mould", "typography", "running shoes", "nuclear power", "volunteering",
 "the immune system", "city buses", "chocolate", "electric kettles", "smartphones", "the Vikings",
 "beekeeping at home", "camping in winter", "public speaking", "mortgages", "rainwater tanks",
 "crossword puzzles", "the Amazon river", "penguins", "the first computers", "password managers",
 "regular expressions", "linked lists", "HTTP", "spreadsheet formulas", "sunscreen", "allergies",
 "composting", "car tyres", "first aid", "knitting", "elephants", "the Moon's phases", "hurricanes",
 "dinosaurs", "street food", "fermentation", "the metric system", "wedding planning", "moving house",
 "a home office", "kites", "lighthouses of Japan", "the Eiffel Tower", "pottery", "vinyl records",
 "snow", "salt", "maps", "trains in India", "space stations", "robots in factories", "microplastics",
 "habits", "procrastination", "negotiation", "online privacy", "open-source software", "APIs"]
more_templates = [
 "Write a dialogue between two friends arguing about {t}.",
 "Give a numbered list of practical tips for someone new to {t}.",
 "Compare {t} today with {t} fifty years ago.",
 "Write a formal letter to a city council proposing a project related to {t}.",
 "I have ten minutes. Teach me the three most important ideas about {t}.",
 "Write a review of a fictional book whose subject is {t}.",
 "Plan a one-week study schedule for learning about {t}.",
 "Write a limerick and then a haiku about {t}.",
 "What questions would a journalist ask an expert on {t}? Give eight, with why each matters.",
 "Write the opening paragraph of a mystery novel set around {t}.",
 "Explain {t} using an analogy from cooking.",
 "Write a short speech for a school assembly about {t}.",
 "A friend says {t} is overrated. Write a polite reply that disagrees.",
 "Draft a blog post introduction about {t} with a catchy title.",
 "What would change in everyday life if {t} disappeared tomorrow?",
 "Write a set of frequently asked questions, with answers, about {t}.",
 "Describe {t} to someone who has never heard of it, in under 150 words.",
 "Write a motivational message for a team working on {t}.",
 "List the pros and cons of a career connected to {t} in a table-like format.",
 "Tell a bedtime story for a five-year-old involving {t}.",
]
SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def prompts(n, pool="first", skip=0):
    if pool == "first":
        pairs = [(tp, t) for tp in templates for t in topics]
    else:
        every = [(tp, t) for tp in templates + more_templates for t in topics + more_topics]
        pairs = [(tp, t) for tp, t in every if tp in more_templates or t in more_topics]
    random.Random(7).shuffle(pairs)
    return [tp.format(t=t) for tp, t in pairs[skip : skip + n]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pool", choices=["first", "wide"], default="first")
    ap.add_argument("--prompts", type=int, default=400)
    ap.add_argument("--skip", type=int, default=0, help="start after this many of the pool's prompts (a later batch: no prompt repeats)")
    ap.add_argument("--parallel", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=320)
    a = ap.parse_args()

    def ask(p):
        body = {"model": a.model, "messages": [{"role": "user", "content": p}], "max_tokens": a.max_tokens, "temperature": 0}
        req = urllib.request.Request(a.url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=3600) as r:
            return p, json.load(r)["choices"][0]["message"]["content"]

    with open(a.out, "w") as f, cf.ThreadPoolExecutor(a.parallel) as ex:
        for n, (p, answer) in enumerate(ex.map(ask, prompts(a.prompts, a.pool, a.skip)), 1):
            f.write(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n")
            f.flush()
            if n % 20 == 0:
                print(f"{n} answered", flush=True)


if __name__ == "__main__":
    main()
