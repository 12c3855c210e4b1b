"""A sample catalog with held-out requests: the intent bench mode and the intent tests measure on it.

Each capability has a description (its input schema's `description`), tags and example phrases; the
paraphrases share no content word with those (tests/unit/intent/test_sample.py checks it), and the
unrelated sentences ask for nothing the catalog serves. SUPPORT_FAMILY is a capability family with a
generic member, for the fuzzy merge (docs/decisions/0022-fuzzy-merge-and-policy-handoff.md): its
`paraphrases` are requests its specific members both match, neither with confidence.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SampleCapability:
    """One capability of the sample catalog and the requests that should reach it."""

    name: str
    description: str
    tags: tuple[str, ...]
    examples: tuple[str, ...]
    side_effect_free: bool
    paraphrases: tuple[str, ...]
    generic: bool = False  # tagged `generic`: its family's generic capability


CATALOG: tuple[SampleCapability, ...] = (
    SampleCapability(
        name="weather.forecast",
        description="Weather forecast for a city",
        tags=("weather", "forecast"),
        examples=("weather forecast for Berlin", "temperature outlook for the weekend in Paris"),
        side_effect_free=True,
        paraphrases=(
            "is it going to rain in Lyon tomorrow",
            "do I need an umbrella today",
            "how hot will it get this afternoon in Madrid",
            "should I expect storms tonight",
            "will it be sunny on Saturday",
            "is there any chance of snow in Oslo",
        ),
    ),
    SampleCapability(
        name="text.translate",
        description="Translate text from one language into another",
        tags=("translation", "language"),
        examples=("translate this paragraph into German", "convert an English sentence to Spanish"),
        side_effect_free=True,
        paraphrases=(
            "how do you say good morning in Italian",
            "what is the Japanese word for cat",
            "render this letter in Portuguese",
            "I need the French version of my resume",
            "say thank you in Korean",
            "put this poem into Dutch",
        ),
    ),
    SampleCapability(
        name="travel.flight-booking",
        description="Book airline flights between cities",
        tags=("travel", "flights", "booking"),
        examples=("book a flight from London to Rome", "reserve airline tickets for two adults"),
        side_effect_free=False,
        paraphrases=(
            "I want to fly to Lisbon next Tuesday",
            "get me a plane seat to New York",
            "find me a cheap way to get to Tokyo by air",
            "I need to be in Chicago by plane on Friday",
            "purchase an economy seat on a jet to Madrid",
            "arrange my trip by plane to Sydney",
        ),
    ),
    SampleCapability(
        name="finance.currency",
        description="Convert money between currencies at the current exchange rate",
        tags=("finance", "currency", "exchange"),
        examples=("convert 100 dollars to euros", "exchange rate between yen and pounds"),
        side_effect_free=True,
        paraphrases=(
            "how many rupees is fifty bucks",
            "what is a Swiss franc worth in rupees",
            "how much is twenty quid in American cash",
            "what would my salary be in Mexican pesos",
            "is the rouble cheap against the greenback today",
            "cost of one bitcoin in Canadian coins",
        ),
    ),
    SampleCapability(
        name="calendar.meeting",
        description="Schedule a meeting in a calendar",
        tags=("calendar", "meeting", "schedule"),
        examples=("schedule a meeting with Anna on Monday", "set up a call with the team next week"),
        side_effect_free=False,
        paraphrases=(
            "put a sync with Bob in my diary for Thursday",
            "find a time for the four of us to talk",
            "invite Carla to a catch-up tomorrow at noon",
            "book a slot for a review with my manager",
            "arrange an appointment with the dentist",
            "block an hour on Wednesday to discuss the budget",
        ),
    ),
    SampleCapability(
        name="recipe.search",
        description="Find cooking recipes for a dish",
        tags=("recipes", "cooking", "food"),
        examples=("find a recipe for lasagna", "how to cook chicken curry"),
        side_effect_free=True,
        paraphrases=(
            "what can I make for dinner with leftover rice",
            "how do I bake banana bread",
            "ideas for a vegetarian lunch",
            "what goes into a good pancake batter",
            "steps to prepare sushi at home",
            "a quick dessert with chocolate and eggs",
        ),
    ),
)

SUPPORT_FAMILY: tuple[SampleCapability, ...] = (
    SampleCapability(name="support.billing", description="Questions about invoices, charges and refunds",
                     tags=("support", "billing", "invoices"), side_effect_free=False, paraphrases=(),
                     examples=("why was I charged twice", "I need a refund for my order")),
    SampleCapability(name="support.account", description="Help with signing in and account access",
                     tags=("support", "account", "login"), side_effect_free=False, paraphrases=(),
                     examples=("I can't sign in to my account", "unlock my account")),
    SampleCapability(name="support.general", description="General customer support for anything else",
                     tags=("support", "help"), side_effect_free=False, generic=True,
                     examples=("I have a problem and need help",),
                     paraphrases=("I want to cancel my gym membership",)),
)

UNRELATED: tuple[str, ...] = (
    "the mitochondria is the powerhouse of the cell",
    "my neighbour's dog barks all night",
    "who won the football match last night",
    "I love the smell of fresh paint",
    "please reset my password",
    "the printer on the third floor is jammed again",
    "what is the meaning of life",
    "my laptop battery drains too fast",
    "tell me a joke about pirates",
    "why is the sky blue",
    "the invoice number is wrong on my bill",
    "I lost my car keys somewhere in the park",
    "can you recommend a good science fiction novel",
    "the elevator is making a strange noise",
    "how many planets are in the solar system",
    "my phone screen cracked when I dropped it",
    "who painted the Mona Lisa",
    "I want to cancel my gym membership",
    "the wifi keeps disconnecting",
    "what year did the Berlin wall fall",
)
