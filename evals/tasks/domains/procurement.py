"""Procurement: purchase orders go to vendors with amounts and approvers; vendors have caps and cities."""

from __future__ import annotations

from evals.tasks.domains.base import Domain, FieldDef, RecordType, StatusFlow


def _f(name: str, pool: str, label: tuple[str, str], train: tuple[str, ...], heldout: tuple[str, ...]) -> FieldDef:
    return FieldDef(name, pool, {"train": label[0], "heldout": label[1]}, {"train": train, "heldout": heldout})


PO = RecordType("po", "po_id", {"train": "purchase order", "heldout": "requisition"},
                {"train": "purchase orders", "heldout": "requisitions"}, (
    _f("vendor", "vendor", ("vendor", "supplier"),
       ("{key} is issued to {value}.", "Vendor on {key}: {value}."),
       ("{key} goes to supplier {value}.", "{value} is the supplier for {key}.")),
    _f("amount", "amount_usd", ("amount usd", "value in dollars"),
       ("{key} totals {value} USD.", "Amount of {key}: {value} USD."),
       ("{key} is worth {value} dollars.", "Committed value on {key}: {value} dollars.")),
    _f("approver", "person", ("approver", "sign-off"),
       ("{key} was approved by {value}.", "Approver of {key}: {value}."),
       ("{value} signed off {key}.", "Sign-off for {key} came from {value}.")),
    _f("status", "status", ("status", "state"),
       ("{key} is {value}.", "Status of {key}: {value}."),
       ("Requisition {key} is {value}.", "State of {key}: {value}.")),
    _f("note", "reason", ("note", "remark"),
       ("{key} is flagged for {value}.", "{key} note: {value}."),
       ("Remark on {key}: {value}.", "{key} carries a flag for {value}.")),
))

VENDOR = RecordType("vendor", "vendor", {"train": "vendor", "heldout": "supplier"},
                    {"train": "vendors", "heldout": "suppliers"}, (
    _f("city", "city", ("city", "base"),
       ("{key} is based in {value}.", "{key} ships from {value}."),
       ("{key} operates from {value}.", "Head office of {key}: {value}.")),
    _f("contact", "person", ("contact", "account rep"),
       ("Our contact at {key} is {value}.", "{value} is the account contact for {key}."),
       ("Account rep for {key}: {value}.", "{value} represents {key}.")),
    _f("cap", "cap_usd", ("spend cap usd", "annual limit in dollars"),
       ("Spending with {key} is capped at {value} USD per year.", "Annual cap for {key}: {value} USD."),
       ("Purchases from {key} must stay under {value} dollars a year.",
        "{key} has an annual limit of {value} dollars.")),
))

FLOW = StatusFlow(
    type="po",
    requester="approver",
    hold_email={
        "train": ("From: {requester}\nSubject: Hold {key}\n\nPlease put {key} {hold} - {reason}. Don't send it to the "
                  "vendor yet.\n\n{requester}",),
        "heldout": ("sender: {requester}\nre: {key}\n\n{key} should be {hold} for the time being: {reason}. "
                    "Nothing goes to the supplier until I confirm.\n- {requester}",),
    },
    release_email={
        "train": ("From: {requester}\nSubject: Re: {key}\n\n{Note}. Please set {key} to {status}.\n\n{requester}",),
        "heldout": ("sender: {requester}\nre: re: {key}\n\nQuick update: {note}. {key} can be {status}.\n"
                    "- {requester}",),
    },
    hold_thought={
        "train": ("{requester} wants {key} held because of {reason}. I'll mark it {hold} and keep the reason.",),
        "heldout": ("{requester} asked for {key} to be {hold} over the {reason}. Logging that now.",),
    },
    release_thought={
        "train": ("{requester} says {note}. I'll move {key} from {hold} to {status}.",),
        "heldout": ("{requester} followed up on {key}: {note}. Changing it to {status}.",),
    },
    release_notes={
        "train": ("the budget line was re-opened", "the corrected quote came in", "legal finished the review",
                  "the vendor resent the form"),
        "heldout": ("finance restored the allocation", "the revised bid arrived", "counsel closed the review",
                    "the supplier completed onboarding"),
    },
    hold_line={"train": ("{key} was set to {hold} because of {reason}.",),
               "heldout": ("Requisition {key} was switched to {hold} over the {reason}.",)},
    release_line={"train": ("{key} moved from {hold} to {status}.",),
                  "heldout": ("Requisition {key} went from {hold} to {status}.",)},
)

PROCUREMENT = Domain(
    name="procurement",
    persona={
        "train": ("You are Ledger, a procurement assistant for a finance operations team.",),
        "heldout": ("You are Quartermaster, an AI aide for a purchasing department.",),
    },
    tasks={
        "train": (
            "Close out the month's purchasing: go through open purchase orders, confirm vendors, amounts and "
            "approvers, check vendor spending caps, and list anything on hold.",
            "We are preparing the quarterly spend review. Collect the open purchase orders with their vendors and "
            "approvers, and tell me where we are near a vendor's cap.",
        ),
        "heldout": (
            "Reconcile outstanding requisitions with supplier records and sign-offs, and report anything suspended.",
            "Draft the purchasing digest: requisition values, suppliers, who signed off, and any annual limits at "
            "risk.",
        ),
    },
    types={"po": PO, "vendor": VENDOR},
    facts=(("po", "vendor"), ("po", "amount"), ("po", "approver"), ("vendor", "contact"), ("vendor", "cap")),
    hop=("po", "vendor", "city"),
    statuses={
        "train": ("on hold", "approved", "escalated", "rejected", "ordered", "received", "invoiced",
                  "pending quote"),
        "heldout": ("suspended", "authorized", "referred", "denied", "placed", "delivered", "billed",
                    "awaiting bid"),
    },
    reasons={
        "train": ("budget freeze", "duplicate invoice", "vendor audit", "missing quote", "price dispute",
                  "contract expiry", "tax form", "delivery damage", "currency swing", "scope change"),
        "heldout": ("spend review", "double billing", "supplier vetting", "bid comparison", "rate disagreement",
                    "agreement lapse", "withholding paperwork", "goods shortfall", "exchange loss",
                    "requirement rework"),
    },
    flow=FLOW,
    filler={
        "train": (
            "Purchase orders above the delegated limit need a second approver.",
            "Three quotes are required for any new vendor engagement.",
            "Invoices are matched three ways against the order and the goods receipt.",
            "Payment terms default to thirty days unless the contract says otherwise.",
            "Vendor master data changes are reviewed by a separate team.",
            "Recurring services are renewed through a framework agreement.",
            "Budget owners receive a variance report at the end of each month.",
            "Urgent purchases still require a retrospective approval.",
            "Credit notes are applied before new invoices are paid.",
            "Capital items are tagged by the asset team on receipt.",
        ),
        "heldout": (
            "Requisitions over the delegated ceiling need two sign-offs.",
            "New suppliers must be compared against competing bids.",
            "Bills are checked against the requisition and the receiving note.",
            "Standard settlement is net forty-five unless agreed otherwise.",
            "Edits to supplier records go through a segregated review.",
            "Subscriptions renew under umbrella agreements.",
            "Cost-centre owners get a monthly spend comparison.",
            "Emergency buys are ratified after the fact.",
            "Refund memos are netted before settlement.",
            "Equipment is labelled by the fixed-asset team when it arrives.",
        ),
    },
    log_sources=("erp-sync", "invoice-matcher", "approval-flow", "vendor-portal", "payment-run"),
    boards=("approvals-queue", "vendor-onboarding", "spend-exceptions"),
    tables={"po": "purchase_orders", "vendor": "vendors"},
)
