"""deleted_models: fine-tuned model and checkpoint ids their owner deleted (`DELETE /v1/models/{id}`).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'deleted_models',
        sa.Column('model_id', sa.String(length=400), nullable=False),
        sa.Column('owner_id', sa.String(length=64), nullable=False),
        sa.Column('job_id', sa.String(length=64), nullable=False),
        sa.Column('deleted_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['owner_id'], ['owners.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('model_id', 'owner_id'),
    )


def downgrade() -> None:
    op.drop_table('deleted_models')
