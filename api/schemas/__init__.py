"""Request and response bodies (pydantic v2), in the shapes of OpenAI's API plus this service's fields."""
