"""Entity pools: the names and numbers tasks are made of, split into disjoint train / held-out halves.

Every value a generated task mentions as an entity (a person, a warehouse, a city, an id, an
answer) is drawn from the pool of its split, so the two splits share no entity. Word lists are
split by alternation (even positions train, odd positions held out); numeric pools by range.
Statuses and reasons are closed vocabularies, written separately per split in
:mod:`evals.tasks.domains`.

This module holds data only; :mod:`evals.tasks.world` samples from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SPLITS = ("train", "heldout")


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_FIRST = _words("""Ingrid Tomas Amara Bruno Chidi Dalia Emeka Farah Goran Hana Ilse Jonas Keiko Lars Mirela
Nadim Oksana Pavel Quinn Rhea Sanjay Tuva Umar Vesna Wren Ximena Yusuf Zora Anneli Bodhan Cyrus Delphine
Eskil Fatima Gideon Halima Ivo Jasna Kofi Liesel Mateo Noor Odile Piotr Rosalind Soren Thandiwe Ulla
Viggo Wanjiru Xavier Yara Zeynep Agnes Bastian Camille Dmitri Elif Florian Greta""")

_LAST = _words("""Halvorsen Okafor Brandt Castellano Dubois Eriksen Fontaine Gallagher Haddad Iwasaki Janssen
Kowalski Lindqvist Moreau Nakamura Oyelaran Petrov Quigley Rasmussen Sandoval Tanaka Ueda Varga Whitfield
Xu Yamamoto Zielinski Abernathy Bergstrom Carvalho Delacroix Esposito Fairbanks Grunewald Holloway Ibarra
Jovanovic Kaminski Lindgren Mbeki Novak Ostrowski Pellegrini Renner Sorensen Takahashi Underhill
Vasquez Wojcik Yilmaz Zamora Achebe Bianchi Coleridge Dragomir Engstrom Falk Gutierrez""")

_WAREHOUSE = _words("""Kestrel Osprey Heron Falcon Plover Merlin Condor Puffin Gannet Harrier Ibis Jacana Kite
Lapwing Magpie Nightjar Oriole Pelican Quail Raven Sandpiper Tern Vireo Warbler Bittern Curlew Dunlin
Egret Fulmar Godwit Avocet Kingfisher Linnet Moorhen Nuthatch Ouzel Petrel Redstart Shrike Brambling""")

_CITY = _words("""Tromso Valencia Gdansk Porto Leipzig Tampere Bergamo Malmo Ghent Lyon Bilbao Krakow Aarhus
Graz Utrecht Brno Nantes Turin Cork Riga Tallinn Vilnius Seville Bremen Linz Genoa Lille Bordeaux
Salzburg Antwerp Odense Uppsala Dresden Bologna Granada Poznan Haarlem Basel Trieste Lisbon""")

_COMPANY = _words("""Nordline Freightway Bluewater Cargofix Alpenrail Tidemark Swiftpath Ironbridge Coastway
Meridian Polaris Keystone Redfern Silverline Harbourlink Crestmoor Larkspur Oakhaven Brightwell Fernwood
Granitex Halcyon Ironwood Juniper Kingsway Lodestar Marlowe Northgate Orchard Pinecrest Quarrystone
Riverton Stonegate Thornbury Umberfield Vantage Westbrook Yellowpine Zephyrus Ashcombe""")

_SERVICE_A = _words("""billing ledger search auth catalog payments inventory notify profile checkout pricing
routing ingest export invoice session media archive metrics quota""")
_SERVICE_B = ("api", "worker", "gateway", "sync")

_HOST_PREFIX = ("db", "app", "cache", "node", "srv", "vm", "edge", "batch")


def alternate(words: Sequence[str], split: str) -> tuple[str, ...]:
    """The half of ``words`` that belongs to ``split`` (even positions train, odd held out)."""
    return tuple(words[SPLITS.index(split)::2])


@dataclass(frozen=True)
class NumberPool:
    """Multiples of ``step`` in [low, high] for one split, written with ``fmt`` (e.g. ``"INC-{}"``)."""

    low: int
    high: int
    fmt: str = "{}"
    step: int = 1

    def value(self, n: int) -> str:
        return self.fmt.format(n)


# Numeric pools: (train, heldout) ranges that never overlap, and whose digit counts keep them from
# colliding with each other or with the years, times and sizes that filler text prints.
_NUMBERS: dict[str, tuple[NumberPool, NumberPool]] = {
    "order_id": (NumberPool(10000, 54999), NumberPool(55000, 99999)),
    "weight_kg": (NumberPool(120, 549), NumberPool(550, 980)),
    "incident_id": (NumberPool(10000, 54999, "INC-{}"), NumberPool(55000, 99999, "INC-{}")),
    "port": (NumberPool(6000, 7499), NumberPool(7500, 8999)),
    "change_id": (NumberPool(1000, 4999, "CHG-{}"), NumberPool(5000, 9999, "CHG-{}")),
    "po_id": (NumberPool(100000, 549999, "PO-{}"), NumberPool(550000, 999999, "PO-{}")),
    "amount_usd": (NumberPool(12000, 54999), NumberPool(55000, 98999)),
    "cap_usd": (NumberPool(1200000, 5490000, step=10000), NumberPool(5500000, 9800000, step=10000)),
    # the held-out surface domain (support; only its held-out halves are used)
    "ticket_id": (NumberPool(10000, 54999, "TCK-{}"), NumberPool(55000, 99999, "TCK-{}")),
    "refund_usd": (NumberPool(1000, 4999), NumberPool(5000, 9899)),
    "seat_count": (NumberPool(120, 549), NumberPool(550, 980)),
}


def _people(split: str) -> tuple[str, ...]:
    firsts, lasts = alternate(_FIRST, split), alternate(_LAST, split)
    return tuple(f"{f} {l}" for f in firsts for l in lasts)


def _hosts(split: str) -> tuple[str, ...]:
    prefixes = alternate(_HOST_PREFIX, split)
    return tuple(f"{p}-{n:02d}" for p in prefixes for n in range(11, 60))


def _services(split: str) -> tuple[str, ...]:
    return tuple(f"{a}-{b}" for a in alternate(_SERVICE_A, split) for b in _SERVICE_B)


def word_pool(name: str, split: str) -> tuple[str, ...]:
    """The named word pool of ``split``; raises KeyError (caught by the caller) for unknown names."""
    if split not in SPLITS:
        raise KeyError(split)
    builders = {
        "person": lambda: _people(split),
        "warehouse": lambda: alternate(_WAREHOUSE, split),
        "city": lambda: alternate(_CITY, split),
        "carrier": lambda: tuple(f"{c} Freight" for c in alternate(_COMPANY, split)),
        "vendor": lambda: tuple(f"{c} Supply" for c in alternate(_COMPANY, split)),
        "service": lambda: _services(split),
        "host": lambda: _hosts(split),
        "account": lambda: tuple(f"{c} Group" for c in alternate(_COMPANY, split)),
    }
    return builders[name]()


def number_pool(name: str, split: str) -> NumberPool:
    """The numeric pool ``name`` of ``split``; raises KeyError for unknown names."""
    return _NUMBERS[name][SPLITS.index(split)]


NUMBER_POOLS = tuple(_NUMBERS)
WORD_POOLS = ("person", "warehouse", "city", "carrier", "vendor", "service", "host", "account")
