"""Agent-step corpora with planted facts, for the search benchmark (benchmarks/bench_search.py).

A corpus is a list of UFO-shaped step dicts (nested ``arguments`` dict, a
``controls`` list of dicts, a long ``page`` text) and, for each planted fact
("the car was moved to Lisbon"), two queries: a *lexical* one whose content
words all occur in the fact ("the car was moved to", or "where was the car
moved to?") and a *paraphrased* one that shares no content word with the
fact ("the automobile got relocated to", or "where did they relocate the
automobile?"); :func:`make_corpus` asserts both. A :class:`Shape` sets how
long the steps are, where in a step the facts sit and how queries are
worded. The text is ASCII, so any tokenizer that splits on non-alphanumerics
splits it as kvmemory's ``Tokenizer`` does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from agents.memory.search import Tokenizer

# (word in the fact, paraphrase sharing no word with it)
SUBJECTS = [
    ("car", "automobile"),
    ("doctor", "physician"),
    ("lawyer", "attorney"),
    ("movie", "film"),
    ("sofa", "couch"),
    ("invoice", "bill"),
    ("password", "passcode"),
    ("laptop", "notebook computer"),
    ("children", "kids"),
    ("boss", "supervisor"),
    ("meeting", "appointment"),
    ("gift", "present"),
    ("luggage", "baggage"),
    ("shop", "boutique"),
    ("medicine", "medication"),
    ("trash", "garbage"),
    ("telephone", "mobile phone"),
    ("teacher", "instructor"),
    ("road", "street"),
    ("bicycle", "bike"),
    ("dog", "puppy"),
    ("apartment", "flat"),
    ("jacket", "coat"),
    ("wallet", "purse"),
    ("refrigerator", "fridge"),
]
# (relation in the fact, lexical question, paraphrased relation, paraphrased question);
# {s} is the subject word, {p} its paraphrase.
RELATIONS = [
    (
        "was moved to",
        "where was the {s} moved to?",
        "got relocated to",
        "where did they relocate the {p}?",
    ),
    ("was repaired by", "who was the {s} repaired by?", "got fixed by", "who fixed the {p}?"),
    ("is owned by", "who is the {s} owned by?", "belongs to", "whose {p} is it?"),
    (
        "was bought in",
        "where was the {s} bought in?",
        "got purchased in",
        "in which town did someone purchase the {p}?",
    ),
    (
        "was hidden under",
        "what was the {s} hidden under?",
        "got concealed beneath",
        "beneath what did they conceal the {p}?",
    ),
    (
        "was delivered on",
        "when was the {s} delivered on?",
        "arrived on",
        "which day did the {p} arrive?",
    ),
    ("was borrowed by", "who was the {s} borrowed by?", "got lent to", "who got lent the {p}?"),
    (
        "was cleaned with",
        "what was the {s} cleaned with?",
        "got washed using",
        "what did they wash the {p} using?",
    ),
    (
        "was sold to",
        "who was the {s} sold to?",
        "got traded to",
        "who received the {p} in the trade?",
    ),
    (
        "was left at",
        "where was the {s} left at?",
        "got forgotten at",
        "where did someone forget the {p}?",
    ),
    (
        "was insured by",
        "who was the {s} insured by?",
        "has coverage from",
        "which company covers the {p}?",
    ),
    ("was sent to", "where was the {s} sent to?", "got shipped to", "where did they ship the {p}?"),
]
OBJECTS = [
    "Lisbon",
    "Marta",
    "Tuesday",
    "the red box",
    "Olsen",
    "March",
    "vinegar",
    "Kyoto",
    "Priya",
    "Oslo",
    "Friday",
    "the garage",
    "Mr Haddad",
    "the attic",
    "Nairobi",
    "soap",
    "Quentin",
    "Valparaiso",
]
# Words a query may share with its fact and still count as paraphrased: function words.
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "at",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "got",
        "has",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "someone",
        "that",
        "the",
        "then",
        "they",
        "this",
        "to",
        "using",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whose",
        "with",
    ]
)

NOUNS = [
    "dialog",
    "window",
    "report",
    "table",
    "cell",
    "value",
    "column",
    "row",
    "sheet",
    "chart",
    "file",
    "folder",
    "document",
    "page",
    "title",
    "header",
    "footer",
    "button",
    "menu",
    "toolbar",
    "ribbon",
    "pane",
    "tab",
    "field",
    "list",
    "item",
    "link",
    "form",
    "setting",
    "option",
    "account",
    "message",
    "email",
    "calendar",
    "contact",
    "task",
    "note",
    "image",
    "slide",
    "section",
    "paragraph",
    "font",
    "border",
    "filter",
    "search",
    "result",
    "status",
    "server",
    "network",
    "printer",
    "download",
    "upload",
    "version",
    "draft",
    "template",
    "label",
    "icon",
    "panel",
    "screen",
    "editor",
    "browser",
    "profile",
    "project",
    "order",
    "customer",
    "price",
    "total",
    "date",
    "name",
    "address",
    "number",
    "summary",
    "comment",
    "reply",
    "attachment",
]
VERBS = [
    "open",
    "close",
    "save",
    "export",
    "print",
    "select",
    "click",
    "type",
    "scroll",
    "load",
    "show",
    "hide",
    "sort",
    "copy",
    "paste",
    "delete",
    "rename",
    "update",
    "check",
    "enter",
    "edit",
    "send",
    "share",
    "attach",
    "insert",
    "format",
    "refresh",
    "submit",
    "cancel",
]
ADJECTIVES = [
    "new",
    "old",
    "empty",
    "current",
    "selected",
    "visible",
    "hidden",
    "blue",
    "large",
    "small",
    "main",
    "default",
    "last",
    "first",
    "next",
    "previous",
    "active",
    "disabled",
    "red",
    "green",
]
SENTENCES = [
    "The {noun} is {adj}.",
    "Click the {noun} button to {verb} the {noun2}.",
    "{Verb} the {noun} with the {adj} {noun2}.",
    "The {noun} {n} shows {k} rows of {noun2} data.",
    "Select {noun} {n} from the {noun2} list.",
    "Press OK to {verb} it.",
    "A {adj} {noun} was added to the {noun2}.",
    "There are {k} items in {noun} {n}.",
    "{Noun} {n}: {adj}, {adj2}, {noun2}.",
    "The user wants to {verb} the {noun} and then {verb2} it.",
    "It is {adj} and ready to {verb}.",
    "Open the {noun} settings with the {adj} menu.",
    "Reference {code} in {noun}_{n}.docx is {adj}.",
    "The {noun} was moved to the {adj} folder.",
    "The {noun} was sent to {noun2} {n} for review.",
    "The {noun} is owned by the {noun2} team.",
    "{Noun} {n} was left at its {adj} position.",
    "Cleaned up {k} {noun} entries with the {noun2} tool.",
    "Waiting for the {noun} to {verb}; {k} percent done.",
]
DISTRACTORS = [
    "The {subject} field is {adj}.",
    "Search results for {subject} show {k} entries.",
    "Open the {subject} tab with the {adj} menu.",
]
ACTIONS = ["click_input", "set_edit_text", "wheel_mouse_input", "select", "wait"]
APPS = ["WINWORD.EXE", "EXCEL.EXE", "explorer.exe", "msedge.exe", "OUTLOOK.EXE"]


@dataclass(frozen=True)
class Shape:
    """How a corpus looks: step length, where facts sit, how facts and queries are worded."""

    name: str
    page_words: tuple[int, int]  # the page text's length, in words, drawn uniformly
    positions: tuple[str, ...]  # where a fact goes (see _plant)
    frame: str  # the fact sentence, with {fact}
    questions: bool  # queries as questions ("where was the car moved to?") or statements


SHAPES = {
    "short-steps": Shape(
        "short-steps",
        (20, 60),
        ("thought", "comment", "arguments.text", "page-start"),
        "Noted for later: {fact}.",
        questions=False,
    ),
    "long-pages": Shape(
        "long-pages",
        (150, 300),
        ("page-middle", "page-end", "controls", "observation"),
        "By the way, {fact} last week, the user said.",
        questions=True,
    ),
}


@dataclass(frozen=True)
class Fact:
    """A planted fact: the step that holds it, where, its sentence and its two queries."""

    step: int
    position: str
    sentence: str
    lexical: str
    paraphrased: str


def _sentence(rng: random.Random) -> str:
    which = rng.randrange(len(SENTENCES))
    if which in _RELATION_TEMPLATES and rng.random() < 0.9:
        which = rng.randrange(len(SENTENCES))  # the relation words stay uncommon
    template = SENTENCES[which]
    noun, noun2 = rng.choices(NOUNS, weights=_ZIPF, k=2)
    verb, verb2 = rng.choices(VERBS, k=2)
    adj, adj2 = rng.choices(ADJECTIVES, k=2)
    return template.format(
        noun=noun,
        noun2=noun2,
        Noun=noun.capitalize(),
        verb=verb,
        verb2=verb2,
        Verb=verb.capitalize(),
        adj=adj,
        adj2=adj2,
        n=rng.randrange(1000),
        k=rng.randrange(2, 60),
        code=f"{rng.getrandbits(28):07x}",
    )


_ZIPF = [1.0 / (rank + 1) for rank in range(len(NOUNS))]


def _name(rng: random.Random) -> str:
    """Return a made-up word (a product, person or file name): the long tail of the vocabulary."""
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3)))


_SYLLABLES = [
    "ka",
    "ro",
    "mi",
    "tel",
    "van",
    "sor",
    "bex",
    "lu",
    "qui",
    "dra",
    "no",
    "pel",
    "zan",
    "tor",
    "fi",
    "gum",
    "ash",
    "ven",
    "ol",
    "rik",
]
# Sentences that use a fact's relation words ("was moved to"): most are drawn again.
_RELATION_TEMPLATES = frozenset(range(13, 18))


def _ui_line(rng: random.Random) -> str:
    """Return a line of an accessibility tree: a control and its text, no prose."""
    kind = rng.choice(["Button", "Edit", "Link", "Tab", "Cell", "MenuItem", "Text"])
    words = rng.choices(NOUNS + VERBS + ADJECTIVES, k=rng.randint(1, 3))
    if rng.random() < 0.4:
        words.append(_name(rng))
    if kind == "Cell":
        return (
            f"Cell {rng.choice('ABCDEFGH')}{rng.randrange(1, 500)} = {rng.randrange(10**6) / 100}"
        )
    return f"{kind} '{' '.join(words).capitalize()}'"


def _page(rng: random.Random, words: int) -> list[str]:
    """Return the lines of a page of about ``words`` words: prose sentences and UI lines.

    One page in 30 names a fact's subject in another context, as real pages do.
    """
    out: list[str] = []
    count = 0
    while count < words:
        text = _sentence(rng) if rng.random() < 0.3 else _ui_line(rng)
        out.append(text)
        count += text.count(" ") + 1
    if rng.random() < 1 / 30:
        line = rng.choice(DISTRACTORS).format(
            subject=rng.choice(SUBJECTS)[0], adj=rng.choice(ADJECTIVES), k=rng.randrange(2, 60)
        )
        out.insert(rng.randrange(len(out) + 1), line)
    return out


def _step(rng: random.Random, i: int, shape: Shape) -> dict[str, Any]:
    action = ACTIONS[i % len(ACTIONS)]
    control = rng.choice(NOUNS).capitalize()
    page = _page(rng, rng.randint(*shape.page_words))
    return {
        "step": i,
        "subtask": f"{rng.choice(VERBS).capitalize()} the {rng.choice(NOUNS)} {i % 97} as PDF",
        "action": action,
        "arguments": {
            "control_text": control,
            "button": "left",
            "double": False,
            "text": _sentence(rng) if action == "set_edit_text" else "",
        },
        "observation": f"window '{rng.choice(NOUNS).capitalize()} {i % 97}.docx' is focused; "
        f"{rng.randrange(2, 9)} controls visible",
        "thought": _sentence(rng) + " " + _sentence(rng),
        "comment": _sentence(rng),
        "cost": round(0.0005 * (i % 13), 4),
        "status": "CONTINUE",
        "application": APPS[i % len(APPS)],
        "round": i // 50,
        "controls": [
            {
                "label": str(k),
                "control_text": f"{rng.choice(VERBS).capitalize()} {rng.choice(NOUNS)}",
                "control_type": rng.choice(["Button", "Edit", "ListItem", "TabItem"]),
            }
            for k in range(rng.randint(2, 6))
        ],
        "page": "\n".join(page),
    }


def make_steps(shape: Shape, start: int, n: int, rng: random.Random) -> list[dict[str, Any]]:
    """Return ``n`` step dicts of ``shape`` without facts, numbered from ``start``."""
    return [_step(rng, i, shape) for i in range(start, start + n)]


def _plant(rng: random.Random, row: dict[str, Any], position: str, sentence: str) -> None:
    """Put ``sentence`` into ``row`` at ``position``."""
    if position in ("thought", "comment", "observation"):
        row[position] = f"{row[position]} {sentence}"
    elif position == "arguments.text":
        row["arguments"]["text"] = sentence
    elif position == "controls":
        controls = row["controls"]
        controls[rng.randrange(len(controls))]["control_text"] = sentence
    else:
        page = row["page"].split("\n")
        where = {"page-start": 0, "page-middle": len(page) // 2, "page-end": len(page)}[position]
        page.insert(where, sentence)
        row["page"] = "\n".join(page)


def _content(terms: list[str]) -> set[str]:
    return {term for term in terms if term not in STOP_WORDS}


def make_corpus(
    shape: Shape, n_steps: int, n_facts: int, seed: int
) -> tuple[list[dict[str, Any]], list[Fact]]:
    """Return ``n_steps`` step dicts of ``shape`` with ``n_facts`` planted facts, and the facts.

    Raises:
        ValueError: if more facts are asked for than there are (subject, relation) pairs.
        AssertionError: if a lexical query does not share its content words with its
            fact, or a paraphrased one shares any.
    """
    pairs = [(s, r) for s in SUBJECTS for r in RELATIONS]
    if n_facts > len(pairs) or n_facts > n_steps:
        msg = (
            f"make_corpus() plants at most {min(len(pairs), n_steps)} facts, got n_facts={n_facts}"
        )
        raise ValueError(msg)
    rng = random.Random(f"{shape.name}/{seed}")
    rng.shuffle(pairs)
    steps = sorted(rng.sample(range(n_steps), n_facts))
    tokenize = Tokenizer()
    rows = make_steps(shape, 0, n_steps, rng)
    facts = []
    for step, ((subject, alt), (relation, question, alt_relation, alt_question)) in zip(
        steps, pairs, strict=False
    ):
        fact = f"the {subject} {relation} {rng.choice(OBJECTS)}"
        sentence = shape.frame.format(fact=fact)
        if shape.questions:
            lexical, paraphrased = question.format(s=subject), alt_question.format(p=alt)
        else:
            lexical, paraphrased = f"the {subject} {relation}", f"the {alt} {alt_relation}"
        said = set(tokenize(sentence))
        shared = _content(tokenize(lexical))
        assert shared, lexical
        assert shared <= said, (lexical, sentence)
        assert not _content(tokenize(paraphrased)) & said, (paraphrased, sentence)
        position = rng.choice(shape.positions)
        _plant(rng, rows[step], position, sentence)
        facts.append(Fact(step, position, sentence, lexical, paraphrased))
    return rows, facts


def step_texts(value: Any) -> list[str]:
    """Return the strings of a step, nested ones included, in the order kvmemory reads them.

    The strings of dicts (their values), lists and tuples count; numbers,
    flags and dict keys do not (``agents.memory.search`` reads items the same way).
    """
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return []
    return [text for inner in value for text in step_texts(inner)]
