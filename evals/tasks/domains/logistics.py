"""Logistics: orders ship from warehouses in cities, with carriers, weights, holds and releases."""

from __future__ import annotations

from evals.tasks.domains.base import Domain, FieldDef, RecordType, StatusFlow


def _f(name: str, pool: str, label: tuple[str, str], train: tuple[str, ...], heldout: tuple[str, ...]) -> FieldDef:
    return FieldDef(name, pool, {"train": label[0], "heldout": label[1]}, {"train": train, "heldout": heldout})


ORDER = RecordType("order", "order_id", {"train": "order", "heldout": "order #"},
                   {"train": "orders", "heldout": "shipments"}, (
    _f("warehouse", "warehouse", ("warehouse", "fulfilment site"),
       ("Order {key} ships from warehouse {value}.", "Order {key} is allocated to the {value} warehouse."),
       ("Fulfilment for order #{key} runs through the {value} site.", "The {value} site is handling order #{key}.")),
    _f("carrier", "carrier", ("carrier", "haulier"),
       ("Order {key} is booked with {value}.", "Carrier for order {key}: {value}."),
       ("Order #{key} has been tendered to {value}.", "{value} will haul order #{key}.")),
    _f("customer", "person", ("customer", "client"),
       ("Order {key} was placed by {value}.", "Customer on order {key} is {value}."),
       ("Client of record for order #{key}: {value}.", "{value} is the client behind order #{key}.")),
    _f("weight", "weight_kg", ("weight kg", "gross kilograms"),
       ("Order {key} weighs {value} kg.", "Order {key} has a gross weight of {value} kg."),
       ("Order #{key} comes to {value} kilograms.", "Declared mass of order #{key}: {value} kilograms.")),
    _f("status", "status", ("status", "state"),
       ("Order {key} is currently {value}.", "Status of order {key}: {value}."),
       ("Order #{key} is now {value}.", "State of order #{key}: {value}.")),
    _f("note", "reason", ("note", "remark"),
       ("Order {key} is flagged for {value}.", "Order {key} note: {value}."),
       ("Remark on order #{key}: {value}.", "Order #{key} carries a flag for {value}.")),
))

WAREHOUSE = RecordType("warehouse", "warehouse", {"train": "warehouse", "heldout": "site"},
                       {"train": "warehouses", "heldout": "sites"}, (
    _f("city", "city", ("city", "location"),
       ("Warehouse {key} is located in {value}.", "The {key} warehouse sits in {value}."),
       ("The {key} site operates out of {value}.", "{value} is home to the {key} site.")),
    _f("manager", "person", ("manager", "site lead"),
       ("Warehouse {key} is managed by {value}.", "{value} runs the {key} warehouse."),
       ("Site lead at {key}: {value}.", "{value} leads the {key} site.")),
))

FLOW = StatusFlow(
    type="order",
    requester="customer",
    hold_email={
        "train": ("From: {requester}\nSubject: Please hold order {key}\n\nHi team,\nplease put order {key} {hold} for "
                  "now because of {reason}. I will confirm when it can go out.\n\nThanks,\n{requester}",),
        "heldout": ("sender: {requester}\nre: shipment #{key}\n\nHello - could you keep #{key} {hold} while we sort "
                    "out the {reason}? I'll get back to you.\n- {requester}",),
    },
    release_email={
        "train": ("From: {requester}\nSubject: Re: order {key}\n\nUpdate: {note}, so order {key} can be {status} "
                  "now.\n\nRegards,\n{requester}",),
        "heldout": ("sender: {requester}\nre: re: shipment #{key}\n\n{Note}. Please move #{key} to {status}.\n"
                    "- {requester}",),
    },
    hold_thought={
        "train": ("{requester} asked to hold order {key} because of {reason}. I'll set it to {hold} and record the "
                  "reason.",),
        "heldout": ("Client {requester} wants #{key} {hold} ({reason}). Updating the record accordingly.",),
    },
    release_thought={
        "train": ("{requester} writes that {note}. I'll change order {key} from {hold} to {status}.",),
        "heldout": ("New instruction from {requester} on #{key}: {note}. Switching it to {status}.",),
    },
    release_notes={
        "train": ("the new address is confirmed", "the payment has cleared", "the paperwork arrived this morning",
                  "the customer approved the revised date"),
        "heldout": ("the client sent the corrected details", "finance signed off the balance",
                    "the documents were countersigned", "the revised slot was accepted"),
    },
    hold_line={"train": ("Order {key} was set to {hold} because of {reason}.",),
               "heldout": ("Shipment #{key} was switched to {hold} over the {reason}.",)},
    release_line={"train": ("Order {key} moved from {hold} to {status}.",),
                  "heldout": ("Shipment #{key} went from {hold} to {status}.",)},
)

LOGISTICS = Domain(
    name="logistics",
    persona={
        "train": ("You are Dispatch Assistant, an operations agent for an outbound logistics team.",),
        "heldout": ("You are FlowOps, an AI coordinator supporting a regional fulfilment network.",),
    },
    tasks={
        "train": (
            "Prepare the outbound plan for next week: review open orders, confirm which warehouse and carrier handle "
            "each one, note any holds, and flag anything that needs a customer follow-up.",
            "Audit this week's delayed orders. For each delay find the cause, the warehouse involved and whether the "
            "customer has been told, then summarise what needs action.",
        ),
        "heldout": (
            "Our fulfilment network is behind schedule. Reconcile open shipments against site allocations and "
            "haulier bookings, and list anything that is blocked.",
            "Build a status brief on pending shipments for the operations review: sites, hauliers, weights and any "
            "pauses requested by clients.",
        ),
    },
    types={"order": ORDER, "warehouse": WAREHOUSE},
    facts=(("order", "warehouse"), ("order", "carrier"), ("order", "weight"), ("order", "customer"),
           ("warehouse", "manager")),
    hop=("order", "warehouse", "city"),
    statuses={
        "train": ("on hold", "released", "expedited", "cancelled", "shipped", "packed", "backordered", "in transit"),
        "heldout": ("paused", "cleared", "rushed", "voided", "dispatched", "staged", "awaiting stock", "en route"),
    },
    reasons={
        "train": ("address change", "customs paperwork", "payment verification", "damaged pallet",
                  "inventory recount", "credit check", "duplicate order", "label misprint", "carrier dispute",
                  "export documents"),
        "heldout": ("recipient relocation", "export license", "fraud screening", "quality inspection",
                    "tariff dispute", "missing invoice", "pricing error", "port congestion", "hazmat review",
                    "bank transfer delay"),
    },
    flow=FLOW,
    filler={
        "train": (
            "Cut-off for same-day dispatch is two hours before the last trailer leaves.",
            "Pallets above the standard height need a separate booking with the carrier.",
            "Dock appointments are assigned in thirty-minute slots.",
            "Orders that miss the cut-off roll over to the next business day automatically.",
            "Carrier invoices are reconciled against proof-of-delivery scans every Friday.",
            "Temperature-controlled goods must be loaded last and unloaded first.",
            "Returns are processed at the same dock as inbound freight.",
            "The planning sheet is refreshed every morning from the order system.",
            "Any change to a booked shipment must be confirmed in writing.",
            "Weekend collections carry a surcharge unless agreed in the contract.",
        ),
        "heldout": (
            "Same-day hand-over closes once the final trailer is sealed.",
            "Oversized loads are quoted individually by the haulier.",
            "Loading bays are booked through the yard management tool.",
            "Late releases are carried forward into the following wave.",
            "Haulier bills are matched to delivery confirmations at month end.",
            "Chilled lines go on the vehicle after ambient stock.",
            "Customer returns share intake bays with supplier deliveries.",
            "The wave plan regenerates overnight from the order book.",
            "Amendments to confirmed bookings need a written request.",
            "Sunday pickups are billed at the premium tariff.",
        ),
    },
    log_sources=("allocator", "dispatch-scheduler", "label-printer", "carrier-sync", "dock-planner"),
    boards=("outbound-exceptions", "carrier-escalations", "dock-schedule"),
    tables={"order": "orders", "warehouse": "warehouses"},
)
