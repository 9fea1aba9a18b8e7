import pytest

from websailor.corpus import Corpus
from websailor.errors import InvalidArgumentError


def _titles(hits):
    return [h.title for h in hits]


def test_real_queries_find_the_right_pages(vital: Corpus):
    results = vital.search(
        [
            "Mona Lisa",
            "river that empties into the Mediterranean in northeast Africa",
            "theory of relativity physicist",
            "1968 film by Stanley Kubrick",
            "who discovered penicillin",
        ],
        k=5,
    )
    assert results[0][0].title == "Mona Lisa"
    assert results[1][0].title == "Nile"
    assert "Albert Einstein" in _titles(results[2])
    assert "2001: A Space Odyssey" in _titles(results[3])[:2]
    assert "Alexander Fleming" in _titles(results[4])


def test_hits_are_distinct_pages_with_real_urls_and_snippets(vital: Corpus):
    hits = vital.search(["capital city of France on the Seine"], k=10)[0]
    assert len(hits) == 10
    assert len({h.doc_id for h in hits}) == 10
    assert [h.rank for h in hits] == list(range(1, 11))
    assert all(h.url == "https://en.wikipedia.org/wiki/" + h.title.replace(" ", "_") or "%" in h.url for h in hits)
    assert all(0 < len(h.snippet) <= 300 for h in hits)
    assert hits == sorted(hits, key=lambda h: -h.score)
    paris = next(h for h in hits if h.title == "Paris")
    assert "Seine" in paris.snippet or "France" in paris.snippet


def test_stemming_matches_inflections(vital: Corpus):
    a = _titles(vital.search(["painters of the Renaissance"], k=5)[0])
    b = _titles(vital.search(["painter of the renaissance"], k=5)[0])
    assert a == b


def test_unknown_words_give_no_results_and_long_queries_work(vital: Corpus):
    assert vital.search(["qwxzzy blorfnik"], k=5) == [[]]
    long = ("history of the Roman Empire " * 400)[:10_000]
    hits = vital.search([long], k=3)[0]
    assert hits and "Roman" in hits[0].title


@pytest.mark.parametrize(
    "queries, k, message",
    [
        ([], 10, "empty list"),
        (["ok", "  "], 10, r"queries\[1\] is empty"),
        ("a string", 10, "not a single string"),
        ([3], 10, r"queries\[0\] must be a string"),
        (["ok"], 0, "k must be a positive integer, got 0"),
        (["ok"], -2, "got -2"),
        (["ok"], "3", "got '3'"),
    ],
)
def test_bad_search_requests(vital: Corpus, queries, k, message):
    with pytest.raises(InvalidArgumentError, match=message):
        vital.search(queries, k=k)


def test_get_by_url_or_title(vital: Corpus):
    doc = vital.get("https://en.wikipedia.org/wiki/Paran%C3%A1_River")
    assert doc is not None and doc.title == "Paraná River"
    assert vital.get("https://en.m.wikipedia.org/wiki/mona_Lisa#History").title == "Mona Lisa"
    assert vital.get("Mona Lisa").url == "https://en.wikipedia.org/wiki/Mona_Lisa"
    assert vital.get("https://en.wikipedia.org/wiki/Not_A_Real_Page_123") is None
    assert vital.get("") is None
    assert vital.closest_titles("https://en.wikipedia.org/wiki/Leonardo_Davinci")[0] == "Leonardo da Vinci"


def test_top_k_selection_by_hand():
    import numpy as np

    from websailor.corpus.index import BM25Index

    scores = np.array([0.0, 2.0, 0.5, 2.0, 0.0, 3.0], dtype=np.float32)
    assert BM25Index.top_k(scores, 2) == [(5, 3.0), (1, 2.0)]
    assert BM25Index.top_k(scores, 10) == [(5, 3.0), (1, 2.0), (3, 2.0), (2, 0.5)]
    assert BM25Index.top_k(np.zeros(4, dtype=np.float32), 3) == []


def test_batch_with_threads_equals_one_by_one(vital: Corpus):
    queries = ["Roman emperor", "painter of water lilies", "largest desert", "quantum mechanics founder"]
    assert vital.search(queries, k=5, n_threads=2) == [vital.search([q], k=5)[0] for q in queries]


def test_bare_wikipedia_urls_resolve(vital: Corpus):
    assert vital.get("en.wikipedia.org/wiki/Nile").title == "Nile"
    assert vital.get("www.wikipedia.org/wiki/Nile").title == "Nile"


def test_decomposed_unicode_is_normalized(tmp_path):
    import json

    from websailor.corpus import CorpusBuildConfig, build_corpus

    decomposed = "Angra do Heroi\u0301smo"  # i + combining acute, as some dumps write it
    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps({"title": decomposed, "text": f"{decomposed} is a city in the Azores."}) + "\n")
    c = Corpus.open(build_corpus(CorpusBuildConfig(source=src, format="jsonl", out=tmp_path / "c")))
    doc = c.get("https://en.wikipedia.org/wiki/Angra_do_Hero%C3%ADsmo")
    assert doc is not None and doc.url == "https://en.wikipedia.org/wiki/Angra_do_Hero%C3%ADsmo"
    assert c.search(["Heroísmo"], k=1)[0][0].title == "Angra do Heroísmo"
