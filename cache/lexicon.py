"""Word lists the semantic-cache guard reads: function words, fillers, negators, antonyms,
synonyms and number words (general English, written by hand, not fitted to a data set)."""

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

# Pairs of words whose swap reverses an answer. Prefix antonyms (un-, non-, dis-, in-, im-,
# ir-, il-) and in-/ex- swaps are detected by rule in the guard.
ANTONYM_PAIRS = """
open close open closed opened closed opening closing add remove added removed adding removing
include exclude included excluded including excluding inclusive exclusive
eat avoid allowed banned allow ban allowed forbidden allow forbid permitted prohibited
pass fail passed failed start stop start end begin end started stopped starting stopping
pause resume paused resumed lock unlock increase decrease increase reduce raise lower
increasing decreasing higher lower high low highest lowest more less most least
more fewer most fewest maximum minimum max min best worst better worse good bad
safe unsafe safe dangerous buy sell bought sold buying selling import export
upload download uploading downloading send receive sending receiving sent received
deposit withdraw deposits withdrawals join leave joining leaving accept reject accepted rejected
approve deny approve reject approved denied approved rejected enable disable enabled disabled
activate deactivate activated deactivated on off in out inbound outbound incoming outgoing
before after early late earlier later earliest latest first last next previous
compulsory optional mandatory optional required optional public private
refund charge credit debit income expense expenses income profit loss gain loss
win lose won lost arrive depart arrival departure arrivals departures
hot cold warm cool heavy light cheap expensive cheapest dearest cheaper dearer
long short longer shorter longest shortest old new older newer oldest newest
young old younger older big small bigger smaller biggest smallest large small larger smaller
fast slow faster slower fastest slowest full empty full part full partial
upgrade downgrade upgrading downgrading hire fire hiring firing employ dismiss
subscribe unsubscribe subscribed unsubscribed connect disconnect connected disconnected
follow unfollow mute unmute block unblock freeze unfreeze install uninstall
encrypt decrypt show hide visible hidden legal illegal lawful unlawful valid invalid
possible impossible eligible ineligible able unable like dislike agree disagree
true false yes no above below over under inside outside internal external
domestic international morning evening day night weekday weekend winter summer
spring autumn north south east west left right front back top bottom up down
borrow lend entry exit import export push pull give take giving taking
keep discard save delete saved deleted create delete created deleted
confirm cancel confirmed cancelled accept decline attend miss allow block
most least often rarely always never can cannot should shouldnt
need avoid should avoid good harmful from to into out increase less increase cut
improve damage improve worsen outstanding inadequate properly fault working broken
benefits downsides benefits drawbacks advantages disadvantages public hide lawful illegal
lawfully illegal legal unlawful legally illegally fair unfair more less
fulltime parttime men women man woman male female boys girls boy girl
tenant landlord tenants landlords buyer seller buyers sellers employer employee
employers employees lender borrower host guest sender recipient teacher student
cover exclude covers excludes covered excluded adults children adult child adults kids
adult kid
""".split()

SYNONYM_GROUPS = [
    "get receive obtain acquire", "order request", "buy purchase", "need require",
    "change modify amend update alter edit", "fix repair mend", "cancel terminate",
    "start begin commence", "end finish", "find locate", "check see view look",
    "give provide", "send post mail", "make create", "book reserve schedule arrange",
    "quit leave", "phone call ring telephone", "help assist support", "show display",
    "use utilise utilize", "enough sufficient", "car vehicle", "house home", "job work",
    "shop store", "kid child", "kids children", "doctor gp", "cost price charge fee",
    "costs prices charges fees", "sort arrange", "allowed permitted", "permit allow",
    "cover insure", "pay settle", "report notify", "tell inform", "contact reach",
    "reset recover", "correct right", "quickly fast", "mobile phone cell", "apply applying",
    "fastest quickest", "faster quicker", "previous earlier prior", "register enrol enroll",
    "submit send file lodge make", "street road", "grade result mark", "agent agency",
    "end close finish", "drawbacks downsides disadvantages cons", "benefits advantages pros",
    "allowed welcome", "price cost", "delivery shipping postage", "parcel package",
    "track trace", "rubbish trash garbage waste", "flat apartment", "holiday vacation leave",
    "film movie", "lorry truck", "autumn fall", "postcode zipcode", "mum mom mother",
    "dad father", "talk speak", "discount reduction", "customer client", "fix sort",
    "atm cashpoint", "tv television", "pc computer", "email mail", "telly tv",
    "receive get", "register signup", "loo toilet", "bin rubbish", "gp doctor",
    "mute silence", "send email", "cancel end stop", "book make", "fee charge",
    "charged billed", "refund money", "repository repo", "connect link", "often schedule",
    "filing submitting", "last final", "shut close", "switch move", "ask request", "price pay",
    "america usa", "guarantee warranty", "unlock unfreeze",
    "lose lost misplace misplaced", "broken faulty damaged defective", "item product goods",
    "refund reimbursement", "problem issue trouble", "error problem issue", "wrong incorrect",
    "luggage baggage", "medicine medication", "tablet pill", "tablets pills",
    "booking reservation", "online internet web", "password passcode", "delete remove erase",
    "query question enquiry inquiry", "complaint grievance", "entitled eligible qualify",
    "postpone defer reschedule", "lift elevator", "queue line", "takeaway takeout",
    "car motor vehicle", "staff employees workers", "salary wage wages earnings",
    "soon quickly", "big large", "bigger larger", "biggest largest", "small little",
    "begin start", "finish complete", "setup configure install", "login signin",
    "logout signout", "bill invoice", "flight plane", "fridge refrigerator",
]
# Phrases that carry no request: dropped before reading a question.
FILLER_PHRASES = (
    r"many thanks", r"thank you( so much| very much)?", r"thanks (a lot|so much)",
    r"sorry,? (silly|stupid|dumb) question,?( but)?", r"quick question,?", r"if you (can|could)",
    r"i was wondering,?", r"can you tell me", r"could you tell me", r"do you know",
    r"(hi|hello|hey) there", r"excuse me", r"sorry to bother you", r"just wondering",
    r"i wanted to ask", r"i'd like to know", r"can i ask", r"much appreciated",
    r"thanks in advance", r"any idea", r"if possible", r"how do i do that",
    r"what steps do i take",
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


# Other names of a named entity (lower-cased); an entity on one side and its alias on the
# other is not an entity clash.
ENTITY_ALIASES = {
    "us": {"usa", "america", "states"}, "usa": {"us", "america"}, "america": {"us", "usa"},
    "uk": {"britain", "kingdom"}, "britain": {"uk"}, "nhs": {"health"},
}


def antonym_map() -> dict[str, set[str]]:
    """word -> its antonyms, from the pair list (both directions)."""
    out: dict[str, set[str]] = {}
    words = ANTONYM_PAIRS
    for a, b in zip(words[0::2], words[1::2], strict=True):
        out.setdefault(a, set()).add(b)
        out.setdefault(b, set()).add(a)
    return out


def synonym_map() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for group in SYNONYM_GROUPS:
        words = group.split()
        for w in words:
            out.setdefault(w, set()).update(x for x in words if x != w)
    return out
