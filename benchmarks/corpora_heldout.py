"""Held-out corpora: families the keyword weighting and the hybrid blend are never tuned on.

The tuning corpora are those of benchmarks/_search_corpus.py (``--sections
quality``) and benchmarks/_hybrid_quality.py (``--sections hybrid``). The
families here share no templates with them and almost no words (a handful,
such as "lent", "shipped" and "notebook", occur in both word lists), and
are only ever used to judge a choice made on those:

``agent-steps``
    UFO-shaped steps of two agents (a host agent that picks applications
    and subtasks, an app agent that acts on controls), each step with a
    subtask, an action and its arguments, a list of controls, an
    observation and a thought. Steps resemble each other: a few dozen
    templates, a small vocabulary, the same controls again and again, so
    a hundred steps lie close to any query.
``chat``
    Turns of a conversation between a user and an assistant: small talk,
    questions and answers about errands, one to six sentences a turn.
``pages``
    Long documents (a handbook, meeting minutes, a travel log) cut into
    pages of 150 to 350 words of prose.
``crowded-steps``
    UFO-shaped steps of a host and an app agent keeping an inventory
    ledger: nearly every step logs one or two ledger entries shaped like
    a fact ("the kettle got pinched from Seville", "the poster was lent
    to Dmitri"), a subject or relation of the facts (said or paraphrased)
    with other words, so that a hundred or more steps lie close to any
    query (the query's 100th best cosine is high) while only the planted
    fact holds its subject and relation together, said or paraphrased.

Every family plants facts ("the umbrella was lent to Ingrid") at several
depths: in a short field or first sentence (``shallow``), in the middle
of the text (``middle``) or at its end, after the longest part of the item
(``deep``). Filler reuses the facts' words in other contexts ("the
umbrella stand is by the door"), so a fact's words alone do not single it
out. Each fact is asked three ways:

- *lexical*: the fact's content words ("umbrella was lent to");
- *paraphrased*: none of its content words ("parasol loaned to");
- *mixed*: the subject as said, the relation paraphrased ("umbrella loaned to"),
  or the other way round.

:func:`make_family` asserts the word-sharing rules of each kind. Everything
is ASCII and deterministic for a ``(family, seed)``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from agents.memory.search import Tokenizer

__all__ = ["FAMILIES", "KINDS", "Corpus", "Fact", "make_family"]

FAMILIES = ("agent-steps", "chat", "pages", "crowded-steps")
KINDS = ("lexical", "paraphrased", "mixed")

# (word in the fact, paraphrase sharing no word with it): none of them in the tuning corpora.
SUBJECTS = [
    ("umbrella", "parasol"),
    ("ticket", "voucher"),
    ("kettle", "teapot"),
    ("blanket", "quilt"),
    ("suitcase", "luggage bag"),
    ("bottle", "flask"),
    ("carpet", "rug"),
    ("ladder", "stepladder"),
    ("lamp", "lantern"),
    ("notebook", "journal"),
    ("helmet", "headgear"),
    ("backpack", "rucksack"),
    ("painting", "artwork"),
    ("necklace", "pendant"),
    ("stroller", "pram"),
    ("scooter", "moped"),
    ("camera", "camcorder"),
    ("keyboard", "keypad"),
    ("mattress", "bedding"),
    ("cabinet", "cupboard"),
    ("vase", "urn"),
    ("tent", "shelter"),
]
# (relation words, paraphrase sharing no content word with them)
RELATIONS = [
    ("was lent to", "got loaned out to"),
    ("was stolen from", "got pinched from"),
    ("was fixed by", "got mended by"),
    ("was stored in", "got kept inside"),
    ("was ordered from", "got purchased via"),
    ("was returned to", "got handed back to"),
    ("was painted by", "got coloured by"),
    ("was found near", "got discovered beside"),
    ("was wrapped in", "got covered with"),
    ("was shipped to", "got mailed over to"),
    ("was swapped for", "got exchanged against"),
    ("was damaged during", "got broken amid"),
]
OBJECTS = [
    "Ingrid",
    "Baltimore",
    "the neighbour",
    "Thursday",
    "Rotterdam",
    "Mrs Okafor",
    "the basement",
    "Winnipeg",
    "Dmitri",
    "the storm",
    "Seville",
    "the caretaker",
    "Halifax",
    "Lucia",
    "a cardboard crate",
    "Gdansk",
]
# Words a query may share with its fact and still count as paraphrased.
FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "at",
        "by",
        "did",
        "do",
        "for",
        "from",
        "got",
        "in",
        "into",
        "is",
        "it",
        "of",
        "on",
        "out",
        "over",
        "the",
        "to",
        "was",
        "were",
        "who",
        "what",
        "where",
        "which",
        "with",
        "when",
    ]
)


@dataclass(frozen=True)
class Fact:
    """A planted fact: the item that holds it, how deep, its sentence and its three queries."""

    item: int
    depth: str
    sentence: str
    queries: dict[str, str]


@dataclass(frozen=True)
class Corpus:
    """One held-out corpus: the items (field dicts, ``item`` numbering them) and the planted facts."""

    family: str
    seed: int
    items: list[dict[str, Any]]
    facts: list[Fact]

    def queries(self, kind: str) -> list[tuple[str, int]]:
        """Return ``(query, item number)`` of every fact asked ``kind`` ways."""
        return [(fact.queries[kind], fact.item) for fact in self.facts]


# -- filler that reuses the facts' words -----------------------------------------------------


def _echo(rng: random.Random) -> str:
    """Return a sentence that uses a fact's subject or its relation words in another context.

    A subject goes with other verbs, a relation with things no fact is
    about, so that only the planted fact holds a subject and its relation
    together (as a real session holds a word in many steps and a fact once).
    """
    subject = rng.choice(SUBJECTS)[0]
    relation = rng.choice(RELATIONS)[0]
    thing = rng.choice(_THINGS)
    return rng.choice(
        [
            f"The {subject} catalogue lists a {thing} too.",
            f"Someone asked whether the {thing} {relation} the usual place.",
            f"A {thing} {relation} a shop last year, not this one.",
            f"Check the {subject} and the {thing} before leaving.",
            f"The note about the {thing} {relation} the front desk.",
            f"No {subject} today, the {thing} is enough.",
        ]
    )


_THINGS = ["parcel", "letter", "key", "spare part", "form", "box", "poster", "sample", "receipt"]


# -- agent steps ---------------------------------------------------------------------------

_APPS = ["Notepad", "Excel", "Outlook", "Edge", "Explorer", "Teams"]
_CONTROLS = [
    "Save",
    "Open",
    "File",
    "Edit",
    "View",
    "Insert",
    "Send",
    "Reply",
    "Search box",
    "Address bar",
    "New tab",
    "Close",
    "OK",
    "Cancel",
    "Apply",
    "Format",
    "Home",
    "Back",
]
_SUBTASKS = [
    "open the {app} window and find the inventory list",
    "copy the inventory rows into a new sheet",
    "write a summary of the inventory in the document",
    "send the inventory summary to the team by email",
    "search the web for the shipping status",
    "save the document in the shared folder",
]
_HOST_THOUGHTS = [
    "The user wants the inventory updated, so {app} should be opened first.",
    "The previous subtask is finished; the next one needs {app}.",
    "I will hand the subtask to the app agent and wait for its result.",
    "The inventory list is in {app}; the app agent should read it.",
]
_APP_THOUGHTS = [
    "I need to click the {control} button to continue with the subtask.",
    "The {control} control is visible, so I will select it.",
    "Typing the text into the {control} field is the next action.",
    "The window shows the inventory list; I will scroll to the next rows.",
    "The dialog asks for confirmation, so I press {control}.",
    "The subtask is almost done; I check the {control} control once more.",
]
_OBSERVATIONS = [
    "The {app} window is focused and {n} controls are visible.",
    "The dialog closed and the inventory list shows {n} rows.",
    "The {control} button was clicked; the window title did not change.",
    "A new tab opened with {n} search results.",
    "The text was typed into the {control} field.",
]
_ACTIONS = ["click_input", "set_edit_text", "select", "wheel_mouse_input", "keyboard_input"]


def _agent_step(rng: random.Random, i: int) -> dict[str, Any]:
    host = i % 6 == 0
    app = _APPS[(i // 6) % len(_APPS)]
    control = rng.choice(_CONTROLS)
    n = rng.randrange(2, 40)
    thought = rng.choice(_HOST_THOUGHTS if host else _APP_THOUGHTS).format(app=app, control=control)
    if rng.random() < 0.15:
        thought += " " + _echo(rng)
    controls = [
        {
            "label": str(k),
            "control_text": rng.choice(_CONTROLS),
            "control_type": rng.choice(["Button", "Edit", "MenuItem", "TabItem", "ListItem"]),
        }
        for k in range(rng.randint(4, 12))
    ]
    return {
        "item": i,
        "agent": "HostAgent" if host else "AppAgent",
        "subtask": rng.choice(_SUBTASKS).format(app=app),
        "action": "select_application" if host else rng.choice(_ACTIONS),
        "arguments": {"control_text": control, "button": "left", "text": ""},
        "thought": thought,
        "controls": controls,
        "observation": rng.choice(_OBSERVATIONS).format(app=app, control=control, n=n),
        "status": "CONTINUE",
        "application": app,
    }


def _plant_step(rng: random.Random, row: dict[str, Any], depth: str, sentence: str) -> None:
    if depth == "shallow":
        row["thought"] = f"{sentence} {row['thought']}"
    elif depth == "middle":
        row["observation"] = f"{row['observation']} {sentence}"
    else:  # deep: a control's text, after the long controls list
        row["controls"][-1]["control_text"] = sentence


# -- chat ----------------------------------------------------------------------------------

_CHAT = [
    "Good morning, how was your weekend?",
    "It was fine, we mostly stayed at home because of the rain.",
    "Can you remind me what is on the list for today?",
    "Sure, there are a few errands and a call with the bank.",
    "I still have to answer the emails from yesterday.",
    "Do you want me to draft a reply for you?",
    "Yes please, keep it short and friendly.",
    "The weather should be better tomorrow afternoon.",
    "Let us plan the shopping for the weekend then.",
    "Thanks, that helps a lot.",
    "I am not sure, let me think about it for a moment.",
    "Could you look up the opening hours of the library?",
    "The library opens at nine and closes at six on weekdays.",
    "We talked about the holiday plans last time, remember?",
    "I would rather go somewhere quiet this year.",
    "That sounds like a good idea to me.",
    "Please add milk and bread to the shopping list.",
    "Done, anything else for the list?",
]


def _chat_turn(rng: random.Random, i: int) -> dict[str, Any]:
    sentences = rng.choices(_CHAT, k=rng.randint(1, 6))
    if rng.random() < 0.2:
        sentences.insert(rng.randrange(len(sentences) + 1), _echo(rng))
    return {
        "item": i,
        "role": "user" if i % 2 == 0 else "assistant",
        "content": " ".join(sentences),
    }


def _plant_text(rng: random.Random, text: str, depth: str, sentence: str) -> str:
    parts = [part.rstrip(".") for part in text.split(". ")]
    where = {"shallow": 0, "middle": len(parts) // 2, "deep": len(parts)}[depth]
    parts.insert(where, sentence.rstrip("."))
    return ". ".join(parts) + "."


# -- pages ---------------------------------------------------------------------------------

_DOCS = ["Office handbook", "Minutes of the board", "Travel log", "Garden diary"]
_PROSE_NOUNS = [
    "office",
    "garden",
    "meeting",
    "budget",
    "schedule",
    "team",
    "visitor",
    "train",
    "hotel",
    "river",
    "morning",
    "evening",
    "policy",
    "report",
    "kitchen",
    "window",
    "corridor",
    "village",
    "harbour",
    "museum",
]
_PROSE = [
    "The {noun} was quiet for most of the {noun2}.",
    "We discussed the {noun} and agreed to revisit it next month.",
    "Everyone should read the section on the {noun} before the {noun2}.",
    "After the {noun} we walked along the {noun2} for an hour.",
    "The {noun} costs more than planned, so the {noun2} will wait.",
    "A short note on the {noun}: it remains open until further notice.",
    "Nobody remembered the {noun}, which surprised the {noun2}.",
    "The {noun} is described in detail in the previous chapter.",
    "It rained again, and the {noun} was moved indoors.",
    "The {noun2} asked about the {noun} twice.",
]


def _page(rng: random.Random, i: int, document: str, number: int) -> dict[str, Any]:
    words = rng.randint(150, 350)
    out: list[str] = []
    count = 0
    while count < words:
        if rng.random() < 0.04:
            text = _echo(rng)
        else:
            text = rng.choice(_PROSE).format(
                noun=rng.choice(_PROSE_NOUNS), noun2=rng.choice(_PROSE_NOUNS)
            )
        out.append(text)
        count += text.count(" ") + 1
    return {"item": i, "document": document, "page": number, "text": " ".join(out)}


# -- crowded agent steps ----------------------------------------------------------------

_LEDGER_THINGS = [
    "crate",
    "pallet",
    "sack of flour",
    "spare fuse",
    "toolbox",
    "roll of tape",
    "mop",
]
_LEDGER_SUBTASKS = [
    "log the returned goods in the {app} ledger",
    "update the ledger row of the storeroom in {app}",
    "check the ledger entries against the packing slip",
    "mark the lost property entries in the {app} ledger",
]
_LEDGER_HOST = [
    "The ledger needs the next entries, so {app} stays open.",
    "The app agent should log the storeroom entries in {app}.",
]
_LEDGER_APP = [
    "I log the entry in the ledger and press {control}.",
    "The ledger row is filled; I select {control} next.",
    "I read the ledger entry back before pressing {control}.",
]
_LEDGER_OBSERVATIONS = [
    "The ledger shows entry {n}:",
    "Row {n} of the ledger now reads:",
    "The {app} ledger saved entry {n}:",
]


_LEDGER_SAID = 0.93  # the share of entries with the words as said; the rest paraphrased


def _ledger_entry(
    rng: random.Random, taken: set[tuple[str, str]], subjects: list[tuple[str, str]]
) -> str:
    """Return an entry shaped like a fact that pairs a subject and a relation no fact pairs.

    Half name a subject of the facts (said or paraphrased), half a thing no
    fact is about; relations are said or paraphrased alike, so an entry lies
    close to the queries of every fact that shares its subject or relation.
    """
    while True:
        subject = rng.choice(subjects)
        relation = rng.choice(RELATIONS)
        if (subject[0], relation[0]) not in taken:
            break
    said = rng.random() < _LEDGER_SAID
    noun = (
        (subject[0] if said else subject[1]) if rng.random() < 0.5 else rng.choice(_LEDGER_THINGS)
    )
    verb = relation[0] if said else relation[1]
    return f"the {noun} {verb} {rng.choice(OBJECTS)}"


def _crowded_steps(
    rng: random.Random, n_items: int, taken: set[tuple[str, str]]
) -> list[dict[str, Any]]:
    rows = []
    for i in range(n_items):
        host = i % 5 == 0
        app = _APPS[(i // 20) % len(_APPS)]
        control = rng.choice(_CONTROLS)
        thought = rng.choice(_LEDGER_HOST if host else _LEDGER_APP).format(app=app, control=control)
        entries = [_ledger_entry(rng, taken, SUBJECTS) for _ in range(rng.choice((1, 1, 2)))]
        observation = rng.choice(_LEDGER_OBSERVATIONS).format(app=app, n=rng.randrange(1, 400))
        observation += " " + "; ".join(entries) + "."
        rows.append(
            {
                "item": i,
                "agent": "HostAgent" if host else "AppAgent",
                "subtask": rng.choice(_LEDGER_SUBTASKS).format(app=app),
                "action": "select_application" if host else rng.choice(_ACTIONS),
                "arguments": {"control_text": control, "button": "left", "text": ""},
                "thought": thought,
                "controls": [
                    {
                        "label": str(k),
                        "control_text": rng.choice(_CONTROLS),
                        "control_type": "Button",
                    }
                    for k in range(rng.randint(3, 8))
                ],
                "observation": observation,
                "status": "CONTINUE",
                "application": app,
            }
        )
    return rows


# -- the corpus ------------------------------------------------------------------------------


def _content(terms: list[str]) -> set[str]:
    return {term for term in terms if term not in FUNCTION_WORDS}


def _items(family: str, rng: random.Random, n_items: int) -> list[dict[str, Any]]:
    if family == "agent-steps":
        return [_agent_step(rng, i) for i in range(n_items)]
    if family == "chat":
        return [_chat_turn(rng, i) for i in range(n_items)]
    rows = []
    per_document = max(1, n_items // len(_DOCS))
    for i in range(n_items):
        document = _DOCS[min(i // per_document, len(_DOCS) - 1)]
        rows.append(_page(rng, i, document, i % per_document + 1))
    return rows


def _plant(family: str, rng: random.Random, row: dict[str, Any], depth: str, sentence: str) -> None:
    if family in ("agent-steps", "crowded-steps"):
        _plant_step(rng, row, depth, sentence)
    elif family == "chat":
        row["content"] = _plant_text(rng, row["content"], depth, sentence)
    else:
        row["text"] = _plant_text(rng, row["text"], depth, sentence)


def make_family(family: str, n_items: int, n_facts: int, seed: int) -> Corpus:
    """Return a held-out corpus of ``family`` with ``n_items`` items and ``n_facts`` planted facts.

    Raises:
        ValueError: for an unknown family, or more facts than items or (subject, relation) pairs.
        AssertionError: if a query breaks its kind's word-sharing rule.
    """
    if family not in FAMILIES:
        msg = f"make_family() takes one of {FAMILIES}, got {family!r}"
        raise ValueError(msg)
    pairs = [(s, r) for s in SUBJECTS for r in RELATIONS]
    if n_facts > min(len(pairs), n_items):
        msg = f"make_family() plants at most {min(len(pairs), n_items)} facts, got {n_facts}"
        raise ValueError(msg)
    rng = random.Random(f"heldout/{family}/{seed}")
    if family == "crowded-steps":  # the facts' pairs first: the ledger entries avoid them
        rng.shuffle(pairs)
        taken = {(subject[0], relation[0]) for subject, relation in pairs[:n_facts]}
        rows = _crowded_steps(rng, n_items, taken)
    else:
        rows = _items(family, rng, n_items)
        rng.shuffle(pairs)
    chosen = sorted(rng.sample(range(n_items), n_facts))
    tokenize = Tokenizer()
    facts = []
    for at, ((subject, alt_subject), (relation, alt_relation)) in zip(chosen, pairs, strict=False):
        sentence = f"The {subject} {relation} {rng.choice(OBJECTS)}."
        depth = rng.choice(("shallow", "middle", "deep"))
        mixed = f"{subject} {alt_relation}" if rng.random() < 0.5 else f"{alt_subject} {relation}"
        queries = {
            "lexical": f"{subject} {relation}",
            "paraphrased": f"{alt_subject} {alt_relation}",
            "mixed": mixed,
        }
        said = set(tokenize(sentence))
        assert _content(tokenize(queries["lexical"])) <= said, (queries, sentence)
        assert not _content(tokenize(queries["paraphrased"])) & said, (queries, sentence)
        mixed_words = _content(tokenize(mixed))
        assert mixed_words & said, (queries, sentence)
        assert mixed_words - said, (queries, sentence)
        _plant(family, rng, rows[at], depth, sentence)
        facts.append(Fact(at, depth, sentence, queries))
    return Corpus(family, seed, rows, facts)
