from websailor.corpus.text import chunk_passages, split_sentences
from websailor.corpus.urls import title_key, title_to_url, url_to_title
from websailor.text import truncate


def test_title_to_url_uses_real_wikipedia_form():
    assert title_to_url("Sierra Madre, California") == "https://en.wikipedia.org/wiki/Sierra_Madre,_California"
    assert title_to_url("AT&T") == "https://en.wikipedia.org/wiki/AT%26T"
    assert title_to_url("Paraná River") == "https://en.wikipedia.org/wiki/Paran%C3%A1_River"
    assert title_to_url("2001: A Space Odyssey") == "https://en.wikipedia.org/wiki/2001:_A_Space_Odyssey"


def test_url_to_title_accepts_the_forms_agents_write():
    assert url_to_title("https://en.wikipedia.org/wiki/Albert_Einstein") == "Albert Einstein"
    assert url_to_title("https://en.m.wikipedia.org/wiki/Albert_Einstein#Early_life") == "Albert Einstein"
    assert url_to_title("http://en.wikipedia.org/wiki/Paran%C3%A1_River") == "Paraná River"
    assert url_to_title("https://en.wikipedia.org/w/index.php?title=Nile&oldid=1") == "Nile"
    assert url_to_title("/wiki/Mona_Lisa") == "Mona Lisa"
    assert url_to_title("  Mona   Lisa ") == "Mona Lisa"
    for t in ["AT&T", "Sierra Madre, California", "Paraná River", "A. J. P. Taylor"]:
        assert url_to_title(title_to_url(t)) == t


def test_title_key_is_first_letter_case_insensitive():
    assert title_key("iPhone") == title_key("IPhone")
    assert title_key("mona_lisa") == "Mona lisa"


def test_sentences_respect_abbreviations():
    text = "A. J. P. Taylor was an English historian. He was born c. 1906 in Lancashire. He died in 1990."
    assert split_sentences(text) == [
        "A. J. P. Taylor was an English historian.",
        "He was born c. 1906 in Lancashire.",
        "He died in 1990.",
    ]


def test_chunk_passages_keeps_short_paragraphs_and_splits_long_ones():
    short = "One sentence here. Two sentences here."
    long = " ".join(f"Sentence number {i} has exactly seven words." for i in range(60))  # 420 words
    passages = chunk_passages([short, "", long])
    assert passages[0] == short
    assert all(len(p.split()) <= 105 for p in passages[1:])
    assert " ".join(passages[1:]) == long


def test_truncate_cuts_at_word_boundary():
    assert truncate("alpha beta gamma", 100) == "alpha beta gamma"
    assert truncate("alpha beta gamma delta", 14) == "alpha beta..."
