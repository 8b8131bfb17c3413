"""What the client tests ask for: a person (structured output) and the weather (a tool)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Person(BaseModel):
    """A person."""

    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=120)


class GetWeather(BaseModel):
    """Current weather in a city."""

    city: str = Field(max_length=20)


WEATHER_REPORT = "21 C and sunny"


def get_weather(city: str) -> str:
    """Current weather in a city."""
    return WEATHER_REPORT
