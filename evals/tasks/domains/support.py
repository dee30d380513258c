"""Customer support: the held-out *surface* domain of the ``horizon`` suites (held-out split only).

Tickets belong to customer accounts, are worked by agents and may carry a refund; accounts have a
customer-success manager, a city and a seat count. Its tool outputs are formats no train task
uses (ticket threads, CRM records, knowledge-base articles, chat transcripts:
:data:`evals.tasks.render.SURFACE_FORMATS`), so held-out pass rates measure transfer to unseen
formats, not only to unseen entities. Only held-out phrasing exists: building it for the train
split is refused (:data:`evals.tasks.domains.SURFACE_DOMAINS`).
"""

from __future__ import annotations

from evals.tasks.domains.base import Domain, FieldDef, RecordType, StatusFlow

SPLIT = "heldout"


def _f(name: str, pool: str, label: str, *sentences: str) -> FieldDef:
    return FieldDef(name, pool, {SPLIT: label}, {SPLIT: sentences})


TICKET = RecordType("ticket", "ticket_id", {SPLIT: "ticket"}, {SPLIT: "tickets"}, (
    _f("account", "account", "account",
       "Ticket {key} was opened by {value}.", "{value} is the account behind ticket {key}."),
    _f("assignee", "person", "agent",
       "Ticket {key} is being worked by {value}.", "{value} took ownership of ticket {key}."),
    _f("refund", "refund_usd", "refund usd",
       "Ticket {key} carries a refund of {value} dollars.", "A refund of {value} dollars sits on ticket {key}."),
    _f("status", "status", "ticket state",
       "Ticket {key} is marked {value}.", "State of ticket {key}: {value}."),
    _f("note", "reason", "escalation flag",
       "Ticket {key} is flagged for {value}.", "Flag on ticket {key}: {value}."),
))

ACCOUNT = RecordType("account", "account", {SPLIT: "account"}, {SPLIT: "accounts"}, (
    _f("csm", "person", "success manager",
       "The {key} account is looked after by {value}.", "{value} is the success manager for {key}."),
    _f("city", "city", "billing city",
       "The {key} account is billed in {value}.", "{value} is where {key} is billed."),
    _f("seats", "seat_count", "licensed seats",
       "The {key} account holds {value} seats.", "{value} licensed seats belong to {key}."),
))

FLOW = StatusFlow(
    type="ticket",
    requester="assignee",
    hold_email={SPLIT: ("{requester}: please keep ticket {key} {hold} while the {reason} is sorted out, "
                        "I'll confirm when it can move.",)},
    release_email={SPLIT: ("{requester}: quick update on ticket {key}, {note}, so it can be {status} now.",)},
    hold_thought={SPLIT: ("{requester} wants ticket {key} {hold} because of the {reason}. Recording that on the "
                          "ticket.",)},
    release_thought={SPLIT: ("{requester} says {note}. Moving ticket {key} from {hold} to {status}.",)},
    release_notes={SPLIT: ("the customer confirmed the fix", "billing approved the credit",
                           "the account owner replied", "the vendor patch shipped")},
    hold_line={SPLIT: ("Ticket {key} was parked as {hold} for the {reason}.",)},
    release_line={SPLIT: ("Ticket {key} changed from {hold} to {status}.",)},
)

SUPPORT = Domain(
    name="support",
    persona={SPLIT: ("You are Helpline, an AI agent working the customer-support queue of a software company.",)},
    tasks={SPLIT: (
        "Work through the support backlog: for each open ticket confirm the account, the agent on it and any "
        "refund, note which tickets are parked and why, and summarise what needs a reply today.",
        "Prepare the weekly support review: accounts with open tickets, their success managers and seat counts, "
        "refunds waiting for approval, and any ticket whose state changed.",
    )},
    types={"ticket": TICKET, "account": ACCOUNT},
    facts=(("ticket", "account"), ("ticket", "assignee"), ("ticket", "refund"), ("account", "csm"),
           ("account", "seats")),
    hop=("ticket", "account", "city"),
    statuses={SPLIT: ("snoozed", "reopened", "refunded", "deferred", "triaged", "merged", "archived", "answered")},
    reasons={SPLIT: ("chargeback review", "identity check", "billing audit", "duplicate charge", "contract renewal",
                     "privacy request", "warranty claim", "outage credit", "account merger", "tax exemption")},
    flow=FLOW,
    filler={SPLIT: (
        "Replies to priority tickets are due within four business hours.",
        "Macros must be reviewed before they are sent to a customer.",
        "Refunds above the agent limit need a team lead's approval.",
        "Tickets without a reply for seven days are closed automatically.",
        "Screenshots attached by customers are kept for thirty days.",
        "Enterprise customers have a named success manager.",
        "Every escalation needs a short summary for the next shift.",
        "Satisfaction surveys go out one day after a ticket is solved.",
        "Known issues are linked from the status page.",
        "Agents tag each ticket with a product area before replying.",
    )},
    log_sources=("helpdesk-sync", "sla-monitor", "billing-bridge", "chat-router", "survey-mailer"),
    boards=("support-escalations", "refund-approvals", "churn-watch"),
    tables={"ticket": "tickets", "account": "accounts"},
)
