"""IT operations: incidents hit services, services run on hosts and ports, changes get frozen and approved."""

from __future__ import annotations

from evals.tasks.domains.base import Domain, FieldDef, RecordType, StatusFlow


def _f(name: str, pool: str, label: tuple[str, str], train: tuple[str, ...], heldout: tuple[str, ...]) -> FieldDef:
    return FieldDef(name, pool, {"train": label[0], "heldout": label[1]}, {"train": train, "heldout": heldout})


INCIDENT = RecordType("incident", "incident_id", {"train": "incident", "heldout": "alert"},
                      {"train": "incidents", "heldout": "alerts"}, (
    _f("service", "service", ("service", "component"),
       ("{key} was raised against {value}.", "Incident {key} affects {value}."),
       ("Alert {key} traces back to {value}.", "{value} is the component behind {key}.")),
    _f("assignee", "person", ("assignee", "responder"),
       ("{key} is assigned to {value}.", "{value} picked up {key}."),
       ("Responder on {key}: {value}.", "{value} is handling {key}.")),
))

SERVICE = RecordType("service", "service", {"train": "service", "heldout": "component"},
                     {"train": "services", "heldout": "components"}, (
    _f("host", "host", ("host", "machine"),
       ("{key} runs on host {value}.", "Service {key} is deployed to {value}."),
       ("{key} lives on machine {value}.", "Machine {value} serves {key}.")),
    _f("port", "port", ("port", "listen port"),
       ("{key} listens on port {value}.", "Port for {key}: {value}."),
       ("{key} binds to {value}/tcp.", "Listening socket of {key}: {value}/tcp.")),
    _f("owner", "person", ("owner", "maintainer"),
       ("{key} is owned by {value}.", "Owner of {key}: {value}."),
       ("{value} maintains {key}.", "Maintainer of {key}: {value}.")),
))

CHANGE = RecordType("change", "change_id", {"train": "change", "heldout": "rollout"},
                    {"train": "changes", "heldout": "rollouts"}, (
    _f("requester", "person", ("requester", "raised by"),
       ("{key} was requested by {value}.", "Requester of {key}: {value}."),
       ("{key} was raised by {value}.", "{value} opened {key}.")),
    _f("status", "status", ("status", "state"),
       ("{key} is {value}.", "Status of {key}: {value}."),
       ("Rollout {key} is {value}.", "State of {key}: {value}.")),
    _f("note", "reason", ("note", "remark"),
       ("{key} is flagged for {value}.", "{key} note: {value}."),
       ("Remark on {key}: {value}.", "{key} carries a flag for {value}.")),
))

FLOW = StatusFlow(
    type="change",
    requester="requester",
    hold_email={
        "train": ("From: {requester}\nSubject: Freeze {key}\n\nPlease keep {key} {hold} until further notice because "
                  "of the {reason}. Do not deploy it.\n\n{requester}",),
        "heldout": ("sender: {requester}\nre: {key}\n\nHeads-up: {key} needs to stay {hold} - {reason}. "
                    "Hold off on the rollout.\n- {requester}",),
    },
    release_email={
        "train": ("From: {requester}\nSubject: Re: {key}\n\n{Note}. You can mark {key} as {status}.\n\n{requester}",),
        "heldout": ("sender: {requester}\nre: re: {key}\n\nUpdate - {note}. Set {key} to {status}, please.\n"
                    "- {requester}",),
    },
    hold_thought={
        "train": ("{requester} asked to stop {key} because of the {reason}. Setting it to {hold} with that note.",),
        "heldout": ("{requester} says {key} must stay {hold} ({reason}). Recording that on the change.",),
    },
    release_thought={
        "train": ("{requester} reports that {note}. {key} goes from {hold} to {status}.",),
        "heldout": ("Follow-up from {requester} on {key}: {note}. Moving it to {status}.",),
    },
    release_notes={
        "train": ("the review is finished", "the audit team has signed off", "the dependency is fixed",
                  "the window was re-approved"),
        "heldout": ("findings are closed", "the assessor cleared it", "upstream is healthy again",
                    "the change board agreed a new slot"),
    },
    hold_line={"train": ("{key} was set to {hold} because of the {reason}.",),
               "heldout": ("Rollout {key} was switched to {hold} over the {reason}.",)},
    release_line={"train": ("{key} moved from {hold} to {status}.",),
                  "heldout": ("Rollout {key} went from {hold} to {status}.",)},
)

ITOPS = Domain(
    name="itops",
    persona={
        "train": ("You are Pager, an SRE assistant for a platform team. You investigate incidents and coordinate "
                  "changes.",),
        "heldout": ("You are Beacon, a reliability copilot helping an infrastructure group triage alerts and manage "
                    "rollouts.",),
    },
    tasks={
        "train": (
            "Overnight we had several incidents. Work out which services and hosts were affected, who owns each one, "
            "and which pending changes should go ahead today.",
            "Prepare the handover for the next on-call shift: open incidents, the services behind them, their hosts "
            "and ports, and the state of scheduled changes.",
        ),
        "heldout": (
            "Triage the alert backlog from the weekend and produce a summary of impacted components, responsible "
            "engineers and rollout decisions.",
            "Reliability review: collect the facts on recent alerts (component, machine, maintainer) and on the "
            "rollout calendar.",
        ),
    },
    types={"incident": INCIDENT, "service": SERVICE, "change": CHANGE},
    facts=(("service", "host"), ("service", "port"), ("service", "owner"), ("incident", "assignee"),
           ("incident", "service")),
    hop=("incident", "service", "host"),
    statuses={
        "train": ("frozen", "approved", "scheduled", "cancelled", "deployed", "rolled back", "canary", "in review"),
        "heldout": ("blocked", "greenlit", "queued", "withdrawn", "live", "reverted", "pilot", "under review"),
    },
    reasons={
        "train": ("security review", "quarterly audit", "load test failure", "schema migration", "holiday freeze",
                  "license renewal", "capacity shortfall", "vendor outage", "certificate expiry", "rollback drill"),
        "heldout": ("penetration test", "compliance audit", "latency regression", "data backfill",
                    "peak season blackout", "contract renegotiation", "quota exhaustion", "upstream incident",
                    "key rotation", "missing runbook"),
    },
    flow=FLOW,
    filler={
        "train": (
            "Error budgets are reviewed every Monday in the reliability sync.",
            "Paging policy escalates to the secondary after fifteen minutes without acknowledgement.",
            "All production changes need a rollback plan attached to the ticket.",
            "Dashboards for latency and saturation are linked from the service catalogue.",
            "Postmortems are blameless and due within five working days.",
            "Canary analysis compares error rates against the stable fleet.",
            "Alert thresholds were tuned last quarter to cut noise.",
            "Runbooks live next to the code and are reviewed with each release.",
            "Capacity planning uses the weekly peak rather than the average.",
            "Feature flags are preferred over hot fixes for risky behaviour changes.",
        ),
        "heldout": (
            "Reliability targets are revisited at the start of each sprint.",
            "Unacknowledged pages roll over to the backup responder.",
            "Every rollout ticket must describe how to undo it.",
            "Golden-signal panels are attached to each component page.",
            "Incident write-ups are published within a week, without blame.",
            "Pilot cohorts are judged against the rest of the fleet.",
            "Noisy monitors were pruned during the last cleanup.",
            "Operational playbooks are versioned with the source.",
            "Headroom is planned against peak traffic, not the mean.",
            "Toggles are favoured over emergency patches for risky changes.",
        ),
    },
    log_sources=("deployer", "alertmanager", "scheduler", "ingress", "config-sync"),
    boards=("oncall-queue", "change-calendar", "reliability-backlog"),
    tables={"incident": "incidents", "service": "services", "change": "changes"},
)
