"""jobs.result: what a succeeded run delivered (`worker.training.reporter.job_result`):
{selected_checkpoint: {mode, metric, step, value, fine_tuned_model_checkpoint}, stopped_early: {step, reason, ...}
or null, steps, planned_steps}.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('jobs', sa.Column('result', JSON, nullable=True))


def downgrade() -> None:
    op.drop_column('jobs', 'result')
