"""job_exports: a job's GGUF / Ollama exports (issue 33; `lcsb_service.exports`, `lcsb_core.export`).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), 'postgresql')


def upgrade() -> None:
    op.create_table(
        'job_exports',
        sa.Column('id', sa.String(length=64), nullable=False),
        sa.Column('job_id', sa.String(length=64), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('formats', _json(), nullable=False),
        sa.Column('checkpoint_step', sa.Integer(), nullable=True),
        sa.Column('files', _json(), nullable=False),
        sa.Column('manifest', _json(), nullable=True),
        sa.Column('error_code', sa.String(length=64), nullable=True),
        sa.Column('error_message', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_job_exports_job_created', 'job_exports', ['job_id', 'created_at'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_job_exports_job_created', table_name='job_exports')
    op.drop_table('job_exports')
