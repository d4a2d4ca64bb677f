"""jobs.data_report: what the worker's dataset check found with the base model's tokenizer (examples
truncated or dropped for having no target token left, with their lines; ignored keys; warnings).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('data_report', JSON, nullable=True))


def downgrade() -> None:
    op.drop_column('jobs', 'data_report')
