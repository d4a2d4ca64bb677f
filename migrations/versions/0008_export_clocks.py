"""job_exports.sent_at and started_at: the clocks the sweeper reads to re-send a queued export whose message
was lost and to fail a running export whose worker died (`lcsb_service.sweeper`).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('job_exports') as batch:
        batch.add_column(sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column('started_at', sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE job_exports SET sent_at = created_at")
    op.execute("UPDATE job_exports SET started_at = created_at WHERE status = 'running'")


def downgrade() -> None:
    with op.batch_alter_table('job_exports') as batch:
        batch.drop_column('started_at')
        batch.drop_column('sent_at')
