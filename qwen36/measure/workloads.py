"""The seven workload kinds the bench measures, with prompts of our own.

Decode speed with MTP tracks how predictable the output is (math drafts are accepted more often
than chat), so one number per kind is reported and the minimum is the headline. Every repetition
sends a different prompt whose very first words differ from every other prompt's: with
``cache_prompt: false`` the server would not reuse a prefix anyway, and distinct openings keep
the measurement honest even against a server that ignored that field.
"""

from __future__ import annotations

from dataclasses import dataclass

WORKLOAD_NAMES = ("prose", "code", "json", "chat", "math", "multilingual", "summarization")


@dataclass(frozen=True)
class Workload:
    name: str
    prompts: tuple[str, ...]

    def prompt(self, rep: int) -> str:
        return self.prompts[rep]


_ARTICLE = (
    "The town council met on Tuesday to discuss the old railway bridge. Engineers reported that "
    "two of its steel girders had corroded and that the load limit should drop from twelve to "
    "five tonnes until repairs are done. Shop owners on the east bank worried that delivery "
    "lorries would have to take a twenty-minute detour. The council agreed to fund a temporary "
    "footbridge, to ask the regional government for half of the repair cost, and to publish a "
    "timetable for the works within a month."
)

_PROSE = (
    "Lighthouse keepers on a remote island: write a short story about the last night before the light is automated.",  # noqa: E501
    "Autumn in a mountain village: describe the first frost and how the people prepare for winter.",
    "Rain on a city at night: write a reflective essay about walking home after a long shift.",
    "Beekeeping grandmother teaches her grandson: tell the story of his first harvest of honey.",
    "Desert caravan lost in a sandstorm: narrate how the travellers find their way back.",
    "Orchestra tuning before a concert: describe the hall, the players and the quiet before the first note.",
    "Shipwreck discovered by divers: write the opening chapter of an adventure novel.",
    "Market day in a harbour town: paint the scene from the point of view of a fish seller.",
    "Glaciers retreating over a century: write a lyrical piece told by the mountain itself.",
    "Clockmaker's apprentice finds a clock that runs backwards: write what happens next.",
)

_CODE = (
    "Python: implement an LRU cache class with get and put in O(1) time, with docstrings.",
    "Rust: write a function that parses a CSV line with quoted fields into a Vec<String>.",
    "JavaScript: implement a debounce function and show how to use it on a search input.",
    "Go: write an HTTP handler that returns the current time as JSON, with a unit test.",
    "SQL: given tables orders and customers, write a query for the top five customers by revenue.",
    "TypeScript: define a generic Result type and a helper that wraps a throwing function.",
    "Bash: write a script that rotates log files older than seven days into a gzip archive.",
    "C: implement a ring buffer for bytes with push, pop and a full/empty check.",
    "Java: write a thread-safe counter and a small program that increments it from four threads.",
    "Kotlin: implement binary search over a sorted list and explain its edge cases in comments.",
)

_JSON = (
    "Inventory of a small bookshop: output a JSON array of five books with title, author, year and price.",
    "Weather report for three cities: return JSON with city, temperature in Celsius, humidity and wind.",
    "Employee directory: produce a JSON object with a departments list, each holding two employees.",
    "Recipe for pancakes as JSON: fields name, servings, ingredients (name, quantity, unit) and steps.",
    "Flight itinerary: output JSON with passenger, two legs (from, to, departure, arrival) and total fare.",
    "Configuration for a web server in JSON: host, port, TLS settings, routes and logging levels.",
    "Quiz of four questions as JSON, each with a question, four options and the correct index.",
    "Music playlist: return a JSON object with name, owner and six tracks with artist and duration.",
    "Sensor readings over one hour as JSON: device id, unit and twelve timestamped values.",
    "Product catalogue entry in JSON for a laptop: specs, variants, stock per warehouse and ratings.",
)

_CHAT = (
    "Hi! I'm planning a weekend trip with two kids. What should we pack for a rainy forecast?",
    "Hello there, could you help me write a polite message declining a dinner invitation?",
    "Hey, I just adopted a cat. How do I help her settle in during the first week?",
    "Good morning! I keep procrastinating on my thesis. Any practical tips to get started today?",
    "So my houseplants keep dying. I water them every day. What am I doing wrong?",
    "Quick question: what's a good way to practise a new language for ten minutes a day?",
    "Honestly I'm nervous about a job interview tomorrow. How should I prepare tonight?",
    "Can you suggest a few board games for a group of six adults who like strategy?",
    "My neighbour's dog barks all night. How can I bring it up without starting a feud?",
    "Thinking about learning to cook. Which five dishes should a beginner master first?",
)

_MATH = (
    "Solve step by step: a train travels 240 km in 3 hours, then 150 km in 2 hours. What is its average speed?",  # noqa: E501
    "Prove that the sum of the first n odd numbers equals n squared.",
    "Compute the derivative of f(x) = x^3 sin(x) and evaluate it at x = 0.",
    "Find all integer solutions of x^2 - 5x + 6 = 0 and explain each step.",
    "Calculate 17 times 23, then divide the result by 7 and give the remainder.",
    "Determine the probability of rolling a total of 8 with two fair six-sided dice.",
    "Integrate x * e^x from 0 to 1, showing the integration by parts.",
    "Show that the square root of 2 is irrational.",
    "Evaluate the sum 1 + 2 + 4 + ... + 2^10 and explain the formula you used.",
    "What is the area of a triangle with sides 5, 12 and 13? Justify your answer.",
)

_MULTILINGUAL = (
    "Traduis en anglais puis explique: « Le chat dort sur le rebord de la fenêtre au soleil. »",
    "Übersetze ins Englische und erkläre die Grammatik: „Morgen fahren wir mit dem Zug nach Berlin.“",
    "Traduce al inglés y comenta el estilo: «La biblioteca abre temprano los sábados por la mañana.»",
    "Traduci in inglese e spiega: «Il mercato del pesce chiude a mezzogiorno ogni domenica.»",
    "Vertaal naar het Engels en leg uit: 'De fietsers wachten bij het stoplicht op groen.'",
    "Traduza para o inglês e explique: 'As crianças brincam no parque depois da escola.'",
    "Przetłumacz na angielski i wyjaśnij: „Babcia piecze chleb w każdą sobotę rano.”",
    "Käännä englanniksi ja selitä: 'Järvi jäätyy yleensä joulukuun lopussa.'",
    "Translate into French, German and Spanish: 'The museum is closed on Mondays for cleaning.'",
    "Çevir ve açıkla (İngilizceye): 'Kış aylarında dağ köyüne ulaşmak zordur.'",  # noqa: RUF001
)

_SUMMARY_TASKS = (
    "Summarize in three bullet points",
    "Give a one-paragraph summary for a busy reader of",
    "List the decisions taken, as a numbered list, in",
    "Write a headline and a two-sentence summary of",
    "Explain to a ten-year-old, in a short paragraph,",
    "Extract who is affected and how, briefly, from",
    "Condense into exactly fifty words",
    "Rewrite as a short press release",
    "Outline the costs and the timeline mentioned in",
    "Produce a tweet-length summary of",
)

_SUMMARIZATION = tuple(f"{task} the following report:\n\n{_ARTICLE}" for task in _SUMMARY_TASKS)

# Not counted: it pays the first-request costs (graph build, page faults) before measuring.
WARMUP_PROMPT = "Warm-up: say hello in one short sentence."

WORKLOADS: tuple[Workload, ...] = (
    Workload("prose", _PROSE),
    Workload("code", _CODE),
    Workload("json", _JSON),
    Workload("chat", _CHAT),
    Workload("math", _MATH),
    Workload("multilingual", _MULTILINGUAL),
    Workload("summarization", _SUMMARIZATION),
)

MAX_REPS = min(len(w.prompts) for w in WORKLOADS)


def select(names: list[str] | None) -> tuple[Workload, ...]:
    """The named workloads in their canonical order (all of them for None)."""
    if not names:
        return WORKLOADS
    unknown = sorted(set(names) - set(WORKLOAD_NAMES))
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOAD_NAMES)}")
    return tuple(w for w in WORKLOADS if w.name in names)


def all_prompts() -> list[str]:
    """Every measured prompt once, for load runs that cycle through them."""
    return [p for w in WORKLOADS for p in w.prompts]
