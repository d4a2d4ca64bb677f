"""jobs.parent_model, jobs.parent_job_id: the lineage of a job continued from a model (its `model` was
one of the owner's `ft:` ids or checkpoint ids; `jobs.model` stays the root base model).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('parent_model', sa.String(length=400), nullable=True))
    op.add_column('jobs', sa.Column('parent_job_id', sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column('jobs', 'parent_job_id')
    op.drop_column('jobs', 'parent_model')
