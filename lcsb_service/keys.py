"""API keys: create, list, revoke, and look up the owner of a presented key.

A key is `sk-lcsb-` + 43 URL-safe random characters (256 bits). Only HMAC-SHA256(secret, key) is
stored (the secret is `LCSB_SECRET_KEY`, so a leaked table alone cannot be used to check guesses), plus
the first 12 characters for display. Changing the secret invalidates every key.

    python -m lcsb_service.keys create --owner alice [--name laptop]   # prints the key once
    python -m lcsb_service.keys list --owner alice
    python -m lcsb_service.keys revoke key-XXXX
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

import typer
from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from lcsb_service.errors import AuthenticationFailed
from lcsb_service.ids import new_id, utcnow
from lcsb_service.models import ApiKey, Owner

KEY_PREFIX = "sk-lcsb-"


def hash_key(secret: str, key: str) -> str:
    """Hex HMAC-SHA256 of `key` under `secret` (64 characters)."""
    return hmac.new(secret.encode(), key.encode(), hashlib.sha256).hexdigest()


def get_or_create_owner(session: Session, name: str) -> Owner:
    """The owner called `name`, created when missing (flushed)."""
    owner = session.execute(select(Owner).where(Owner.name == name)).scalar_one_or_none()
    if owner is None:
        owner = Owner(id=new_id("owner"), name=name, created_at=utcnow())
        session.add(owner)
        session.flush()
    return owner


def create_key(session: Session, secret: str, owner_name: str, name: str | None = None) -> tuple[ApiKey, str]:
    """Create a key for `owner_name` (creating the owner if needed). Returns (row, plaintext key); the
    plaintext is not stored anywhere."""
    owner = get_or_create_owner(session, owner_name)
    plain = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(id=new_id("key"), owner_id=owner.id, key_hash=hash_key(secret, plain), prefix=plain[:12],
                 name=name, created_at=utcnow())
    session.add(row)
    session.flush()
    return row, plain


def owner_for_key(session: Session, secret: str, presented: str | None) -> Owner:
    """The owner of a presented key.

    Raises:
        AuthenticationFailed: no key (code `missing_api_key`), or an unknown or revoked one
            (`invalid_api_key`).
    """
    return owner_and_object(session, secret, presented, None, None)[0]


def owner_and_object(session: Session, secret: str, presented: str | None, model: type[Any] | None,
                     object_id: str | None) -> tuple[Owner, Any]:
    """The owner of a presented key and, in the same query, their row `object_id` of the mapped class
    `model` (which has `id` and `owner_id`): None when missing or another owner's. One round trip.

    Raises:
        AuthenticationFailed: no key (code `missing_api_key`), or an unknown or revoked one
            (`invalid_api_key`).
    """
    if not presented:
        raise AuthenticationFailed("no API key: send 'Authorization: Bearer <key>'", code="missing_api_key")
    stmt = (select(Owner) if model is None or object_id is None else
            select(Owner, model).outerjoin(model, and_(model.id == object_id, model.owner_id == Owner.id)))
    row = session.execute(
        stmt.join(ApiKey, ApiKey.owner_id == Owner.id)
        .where(ApiKey.key_hash == hash_key(secret, presented), ApiKey.revoked_at.is_(None))
    ).one_or_none()
    if row is None:
        raise AuthenticationFailed("incorrect API key provided", code="invalid_api_key")
    return row[0], (row[1] if len(row) > 1 else None)


app = typer.Typer(help="Manage API keys of the LCSB service (uses the LCSB_* settings).", no_args_is_help=True)


def _database():
    from lcsb_service.db import Database
    from lcsb_service.settings import Settings

    settings = Settings()
    return settings, Database(settings.resolved_database_url)


@app.command()
def create(owner: str = typer.Option(..., help="owner name; created if new"),
           name: str = typer.Option(None, help="a label for the key")) -> None:
    """Create a key and print it once (it cannot be shown again)."""
    settings, db = _database()
    with db.session() as session:
        row, plain = create_key(session, settings.secret_key.get_secret_value(), owner, name)
    typer.echo(f"created {row.id} for owner {owner}; store this key now, it is not shown again:")
    typer.echo(plain)


@app.command("list")
def list_keys(owner: str = typer.Option(..., help="owner name")) -> None:
    """List an owner's keys (id, prefix, name, created, revoked)."""
    _, db = _database()
    with db.session() as session:
        rows = session.execute(select(ApiKey).join(Owner).where(Owner.name == owner)
                               .order_by(ApiKey.created_at)).scalars().all()
        for r in rows:
            typer.echo(f"{r.id}\t{r.prefix}...\t{r.name or ''}\t{r.created_at:%Y-%m-%d %H:%M}\t"
                       f"{'revoked' if r.revoked_at else 'active'}")


@app.command()
def revoke(key_id: str) -> None:
    """Revoke a key by its id (`key-...`)."""
    _, db = _database()
    with db.session() as session:
        row = session.get(ApiKey, key_id)
        if row is None:
            typer.echo(f"no key {key_id}", err=True)
            raise typer.Exit(1)
        row.revoked_at = row.revoked_at or utcnow()
    typer.echo(f"revoked {key_id}")


if __name__ == "__main__":
    app()
