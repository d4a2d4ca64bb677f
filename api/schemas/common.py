"""Shared shapes: the OpenAI error body, cursor pages and the strict model config of request bodies."""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T")
# Unknown fields are errors, and types are strict: a number sent as a string ("2"), a float for an
# integer (2.0) or a number for a boolean is refused, as OpenAI's schema types them, never coerced.
Strict = ConfigDict(extra="forbid", strict=True)


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    """`{"error": {"message", "type", "param", "code"}}`, as OpenAI answers errors."""

    error: ErrorDetail


class Page(BaseModel, Generic[T]):
    """A cursor page: pass the last item's id as `after` to get the next page while `has_more`."""

    object: Literal["list"] = "list"
    data: list[T]
    has_more: bool
    first_id: str | None = None
    last_id: str | None = None


def errors(*codes: int) -> dict[int | str, dict]:
    """OpenAPI `responses` entries with the error body for the given status codes."""
    return {code: {"model": ErrorBody} for code in codes}
