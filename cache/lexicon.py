"""Word lists the question reader and the exact checks use: function words, fillers,
negators, contractions, number and date words (general English, written by hand). Which
words mean the same or the opposite is the pair verifier's to judge (cache/pair_model.py)."""

from __future__ import annotations

FILLERS = frozenset(
    "um uh er erm hmm so hi hello hey please thanks thank thx cheers ok okay well just quick "
    "question like basically actually oh ah yeah yes hiya right anyway cheers".split()
)

FUNCTION_WORDS = frozenset(
    """a an the i me my mine we us our ours you your yours it its this that these those there
    here is are was were be been being am do does did done doing have has had having can could
    would should will shall may might must need needs needed to of in on at by for from with
    as into onto about over under up out off than then and or but if so how what which where
    when why whether who whom whose whats hows wheres whens whos any some anything something one
    get got getting go going way ways possible able allowed let lets want wanted wish know tell
    please also still really exactly currently ever best there s t d ll ve re m o much many
    way steps step someone somebody something thing things process procedure""".split()
)

NEGATORS = frozenset(
    "not no never none nothing nobody nowhere neither nor without cannot lacking".split()
)

CONTRACTIONS = {
    "won't": "will not", "can't": "can not", "cannot": "can not", "shan't": "shall not",
    "n't": " not", "'re": " are", "'ve": " have", "'ll": " will", "'d": " would",
    "'m": " am", "what's": "what is", "it's": "it is", "that's": "that is",
    "there's": "there is", "where's": "where is", "who's": "who is", "how's": "how is",
    "when's": "when is", "let's": "let us",
}

FILLER_PHRASES = (
    r"many thanks", r"thank you( so much| very much)?", r"thanks (a lot|so much)",
    r"sorry,? (silly|stupid|dumb) question,?( but)?", r"quick question,?", r"if you (can|could)",
    r"i was wondering,?", r"can you tell me", r"could you tell me", r"do you know",
    r"(hi|hello|hey) there", r"excuse me", r"sorry to bother you(,? but)?", r"just wondering",
    r"i wanted to ask", r"i'd like to know", r"can i ask", r"much appreciated",
    r"thanks in advance", r"any idea", r"if possible", r"how do i do that",
    r"what steps do i take", r"just curious,?", r"good morning", r"one more thing:?",
    r"please tell me:?", r"if you know", r"can you help(?=\?)", r"asap",
)

# Generic rewordings of the same request, rewritten to one form before reading a question.
REWRITES = (
    (r"\bwhat(?: is|'s) the (?:price|cost) (?:of|for)\b", "how much is"),
    (r"\bwhat time\b", "when"),
    (r"\b(?:is it possible|am i able) (?:for me )?to\b", "can i"),
    (r"\bwhat(?: is|'s|are) the (?:best )?(?:way|steps|process|procedure) (?:to|for)\b",
     "how do i"),
    (r"\bhow can i\b", "how do i"),
    (r"\bsign up\b", "register"),
    (r"\bi(?:'d| would) like to\b", ""),
    (r"\bi want to\b", ""),
    (r"\bis there (?:a|any) way (?:for me )?to\b", "can i"),
    (r"\bam i allowed to\b", "can i"),
    (r"\bhow much does (.+?) cost\b", r"how much is \1"),
    (r"\bwhat does (.+?) cost\b", r"how much is \1"),
    (r"\bwhen (?:are|is|do|does) (you|it|they|we) open\b", r"what are \1 opening hours"),
    (r"\b(?:turn|switch) on\b", "enable"),
    (r"\b(?:turn|switch) off\b", "disable"),
    (r"\bsend (\w+ )?back\b", r"return \1"),
    (r"\b(?:get|have) (?:my |the |your )?money back\b", "get refund"),
    (r"\b(?:sign|log) ?(?:in|on)(?:to)?\b", "login"),
    (r"\b(?:sign|log) ?out\b", "logout"),
    (r"\bset ?up\b", "setup"),
    (r"\bfind out\b", "check"),
    (r"\bget in touch(?: with)?\b", "contact"),
    (r"\b(?:yearly|annually|(?:per|a|each|every) year)\b", "annual"),
    (r"\b(?:per|a|each|every) month\b", "monthly"),
    (r"\b(?:per|a|each|every) week\b", "weekly"),
    (r"\b(?:per|a|each|every) day\b", "daily"),
    (r"\bthis evening\b", "tonight"),
)

NUMBER_WORDS = {
    "zero": 0, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
    "million": 1000000, "second": 2, "third": 3, "fourth": 4, "fifth": 5,
    "sixth": 6, "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "half": 0.5,
    "quarter": 0.25, "double": 2, "twice": 2, "dozen": 12,
}

# Words that name a date or a unit of quantity: a difference in them changes the answer.
DATE_WORDS = frozenset(
    """monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday
    tonight january february march april may june july august september october november
    december week weeks month months year years day days hour hours minute minutes
    weekly monthly yearly annual annually daily hourly""".split()
)

# Units of quantity, each written one way (its first form): "2.5 litres" reads as 2.5l, and a
# number followed by one carries it ("100 euros" / "100 dollars" differ).
UNIT = {word: forms.split()[0] for forms in """kg kilo kilos kilogram kilograms
    g gram grams|mg|lb lbs pound pounds|oz ounce ounces
    km kilometre kilometres kilometer kilometers|mile miles|m metre metres meter meters
    cm centimetre centimetres|mm|inch inches|ft foot feet|yard yards
    l litre litres liter liters|ml|gallon gallons|pint pints|cup cups
    tablespoon tablespoons|teaspoon teaspoons
    mph|kph kmh|c celsius|f fahrenheit|kelvin|percent|gb|mb|kb|tb|ghz|mhz|hz|kw|kwh
    w watt watts|volt volts|usd dollar dollars|eur euro euros|gbp sterling|jpy yen|cents
    acre acres|hectare hectares|kcal calorie calories|joule joules""".replace("\n", "|").split("|")
    for word in forms.split()}
UNITS = frozenset(UNIT)

# Programming words no dictionary lists: read as words, never mended ("int" is no typo of "into").
CODE_WORDS = frozenset(
    "int ints str bool boolean enum const def len dict dicts args kwargs param params async "
    "await iter stdin stdout stderr println printf malloc calloc realloc sizeof typeof".split()
)
