"""A small real store for the console: trajectories finalized and attributed, a library with two
versions and a confidence history, memories with versions; for two owners who must not see each other."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from actors.engine.model.trajectories import NodeIn, Outcome, Trajectory
from cluster.experience.models import LibrarySource
from cluster.experience.repository import SqlExperienceStore
from cluster.memory.models import MemoryUpdate, MemoryWrite
from cluster.services import Services, analysis_for
from tests.unit.engine.builders import INSERT_ACTIONS, Builder, bulk_vs_single_runs

ALICE, BOB = "alice", "bob"
TOKENS = {"token-alice": ALICE, "token-bob": BOB}
RETRY_TASK = "Import 300 products, retrying in bulk"
BOB_TASK = "Bob's private import of 40 invoices"
BOB_MEMORY = "Bob keeps his invoices in the blue folder"


@dataclass
class Seeded:
    retry_run: uuid.UUID
    bob_run: uuid.UUID
    template_id: uuid.UUID
    bob_template_id: uuid.UUID | None
    memory_id: uuid.UUID
    bob_memory_id: uuid.UUID
    trajectories: list[uuid.UUID] = field(default_factory=list)


def retry_run() -> Trajectory:
    """One item at a time times out on 300 rows; the agent goes back and imports in bulk: two sibling choices."""
    b = Builder(task=RETRY_TASK)
    path = "/tmp/retry/products_300.csv"
    root = b.add("open_file", params={"path": path}, context={"goal": "Import products from a CSV file"})
    context = {"goal": "Import products from a CSV file", "row_count": 300, "file": {"path": path, "encoding": "utf-8"}}
    failed = b.add(
        "add_item",
        INSERT_ACTIONS,
        parent=root,
        status="failure",
        params={"sku": "SKU-9-300", "price": 909},
        context=context,
        summary="timeout after 30s at row 41",
    )
    b.add("verify", parent=failed, status="failure")
    worked = b.add(
        "bulk_import", INSERT_ACTIONS, parent=root, params={"file": path, "encoding": "utf-8"}, context=context
    )
    b.add("verify", parent=worked)
    return b.build("success")


def record(services: Services, owner: str, run: Trajectory) -> uuid.UUID:
    """Record and finalize a trajectory as the tools would, under fresh ids."""
    tid = uuid.uuid4()
    header = run.header.model_copy(update={"trajectory_id": tid})
    ids = {n.node_id: uuid.uuid4() for n in run.nodes}
    nodes = [
        NodeIn.model_validate(
            {
                **n.model_dump(exclude={"seq"}),
                "node_id": ids[n.node_id],
                "parent_id": ids.get(n.parent_id) if n.parent_id else None,
            }
        )
        for n in run.nodes
    ]
    services.capture.record(owner, tid, nodes, header)
    assert run.outcome is not None
    services.capture.finalize(owner, tid, Outcome(status=run.outcome.status))
    return tid


def seed(services: Services) -> Seeded:
    ids = [record(services, ALICE, run) for run in bulk_vs_single_runs()]
    retry = record(services, ALICE, retry_run())
    bob_run = Builder(task=BOB_TASK)
    bob_run.add("open_file", params={"path": "/tmp/invoices.csv"})
    bob = record(services, BOB, bob_run.build("success"))
    analysis_for(services).run_once()

    experience = services.experience
    templates = [experience.get_template(ALICE, t) for t in _template_ids(services, ALICE)]
    assert templates, "attribution learned nothing from the seeded runs"
    top = max(templates, key=lambda t: t.support.trajectories)
    experience.report_outcome(ALICE, [top.template_id], True, uuid.uuid4())
    experience.report_outcome(ALICE, [top.template_id], False, uuid.uuid4())
    # A second version beside the active one, with the top rule's confidence changed: the diff's subject.
    second = [t.model_copy(update={"confidence": round(t.confidence / 2, 3)}) if t is top else t for t in templates]
    experience.create_version(ALICE, second, LibrarySource.IMPORT, note="halved the top rule")

    timezone = services.memory.apply_write(ALICE, MemoryWrite(key="timezone", value="User lives in Lisbon (UTC+0)"))
    moved = services.memory.apply_update(
        ALICE, MemoryUpdate(memory_id=timezone.memory_id, value="User moved to Tokyo (UTC+9)")
    )
    services.memory.apply_write(
        ALICE, MemoryWrite(key="editor", value="Prefers vim keybindings in every editor", entity="editor")
    )
    services.memory.apply_write(ALICE, MemoryWrite(key="report_day", value="Weekly report is due on Fridays"))
    bob_memory = services.memory.apply_write(BOB, MemoryWrite(key="invoices", value=BOB_MEMORY))
    bob_templates = _template_ids(services, BOB)
    return Seeded(
        retry_run=retry,
        bob_run=bob,
        template_id=top.template_id,
        bob_template_id=bob_templates[0] if bob_templates else None,
        memory_id=moved.memory_id,
        bob_memory_id=bob_memory.memory_id,
        trajectories=[*ids, retry],
    )


def _template_ids(services: Services, owner: str) -> list[uuid.UUID]:
    """The templates of the owner's active library version."""
    with services.db.read() as session:
        store = SqlExperienceStore(session)
        return [t.template_id for t, _ in store.iter_owner(owner, version=store.active_version(owner))]
