"""jobs.warnings: what went wrong in a run that did not fail, e.g. a finite divergence
(`worker.divergence`): a list of {code, criterion, step, message, ...}.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('warnings', JSON, nullable=True))


def downgrade() -> None:
    op.drop_column('jobs', 'warnings')
