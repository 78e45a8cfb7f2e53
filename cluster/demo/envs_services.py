"""Families behind remote services: settling a card payment, geocoding a delivery address.

Hidden rules are listed in :mod:`cluster.demo.envs`. ``payment_settle``'s right call depends on
what the first step returned; ``address_geocode``'s right call fails at random one time in ten.
"""

from __future__ import annotations

import random
from types import MappingProxyType

from pydantic import JsonValue

from cluster.demo.env_base import (
    Call,
    Episode,
    StepResult,
    StepView,
    date_text,
    fail,
    make_view,
    mismatch,
    ok,
    partial,
    token,
    tool_call,
)

AUTH_RESULTS = ("approved", "challenge_required", "partially_approved")


class PaymentSettle(Episode):
    """Authorize a card payment, then settle it the way the authorization allows.

    The authorization's answer is drawn with the instance but shown only once ``authorize_payment``
    has returned it: the settle step's context carries it as ``auth_result``.
    """

    family = "payment_settle"
    task_type = "payment"
    first_stage = "authorize"
    decoys = MappingProxyType(
        {
            "settle": (
                ("refund_and_recharge", "a refund needs a settled payment first"),
                ("void_authorization", "voiding cancels the order; the task is to settle it"),
            )
        }
    )
    default_budget = 8

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        self.auth_result = self.rng.choice(AUTH_RESULTS)
        self.amount = f"{self.rng.randint(5, 900)}.{self.rng.randint(0, 99):02d}"
        self.currency = self.rng.choice(("EUR", "GBP", "SEK", "CHF"))
        self.ordered_on = date_text(self.rng)
        self.order = f"ord_{token(self.rng, 8)}"
        self.returned: str | None = None
        """What ``authorize_payment`` answered; None until it has run."""

    @property
    def task(self) -> str:
        return f"Take payment of {self.amount} {self.currency} for order {self.order} placed on {self.ordered_on}"

    def _view(self, stage: str) -> StepView:
        orders: list[JsonValue] = [self.order]
        if stage == "authorize":
            return make_view(
                stage,
                {"goal": "authorize the card payment", "orders": orders},
                tool_call("authorize_payment", order_id=self.order),
            )
        if stage == "capture":
            return make_view(
                stage,
                {"goal": "capture after the challenge", "orders": orders},
                tool_call("capture_payment", order_id=self.order),
            )
        context: dict[str, JsonValue] = {
            "goal": "settle the payment",
            "auth_result": self.returned,
            "amount": self.amount,
            "currency": self.currency,
            "ordered_on": self.ordered_on,
            "orders": orders,
        }
        return make_view(
            stage,
            context,
            tool_call("capture_payment", order_id=self.order),
            tool_call("start_3ds_challenge", order_id=self.order),
            tool_call("capture_partial", order_id=self.order),
        )

    def _judge(self, stage: str, call: Call) -> StepResult:
        missing = mismatch(call, "order_id", self.order, "order")
        if missing is not None:
            return missing
        if stage == "authorize":
            return ok(f"authorization: {self.auth_result}", latency_ms=350)
        if stage == "capture":
            return ok("captured", latency_ms=300)
        if call.action == "capture_payment":
            if self.auth_result == "approved":
                return ok("captured", latency_ms=300)
            return fail(f"capture refused: the authorization is {self.auth_result}", latency_ms=120)
        if call.action == "start_3ds_challenge":
            if self.auth_result == "challenge_required":
                return ok("cardholder passed the 3-D Secure challenge", latency_ms=2_400)
            return fail("no challenge pending for this authorization", latency_ms=120)
        if self.auth_result == "partially_approved":
            return ok(f"captured the approved part of {self.amount} {self.currency}", latency_ms=300)
        if self.auth_result == "approved":
            # It ran, but settled less than the order: the agent's aim, not the tool, was off.
            return partial("captured half; the rest of the approved amount stays on hold", latency_ms=300)
        return fail("capture refused: the authorization is challenge_required", latency_ms=120)

    def _next(self, stage: str, call: Call) -> str | None:
        if stage == "authorize":
            self.returned = self.auth_result
            return "settle"
        return "capture" if call.action == "start_3ds_challenge" else None

    def oracle_steps(self) -> float:
        # Authorize and settle; a challenge adds the capture after it.
        return 3.0 if self.auth_result == "challenge_required" else 2.0


GEOCODER_NOISE = 0.1
WRONG_FREEFORM_SUCCESS = 0.15


class AddressGeocode(Episode):
    """Geocode a delivery address; the geocoder is flaky.

    The right lookup fails at random one call in ten (``GEOCODER_NOISE``); a free-form lookup of an
    address that has a postcode mostly fails (ambiguous street names) but now and then works, and a
    structured lookup without a postcode always fails. The noise is seeded by instance and step, so
    every condition meets the same luck at the same step.
    """

    family = "address_geocode"
    task_type = "geocode"
    first_stage = "load"
    decoys = MappingProxyType(
        {"geocode": (("geocode_by_ip", "the IP address locates the sender's office, not the recipient"),)}
    )
    default_budget = 8

    def __init__(self, seed: int, budget: int | None = None) -> None:
        super().__init__(seed, budget)
        self.has_postcode = self.rng.random() < 0.55
        self.country = self.rng.choice(("DE", "FR", "JP", "BR", "NZ", "CA"))
        self.requested_on = date_text(self.rng)
        self.shipment = f"shp_{token(self.rng, 8)}"

    @property
    def task(self) -> str:
        return f"Find coordinates for the delivery address of shipment {self.shipment} ({self.country})"

    def _view(self, stage: str) -> StepView:
        shipments: list[JsonValue] = [self.shipment]
        if stage == "load":
            return make_view(
                stage,
                {"goal": "load the address", "shipments": shipments},
                tool_call("load_address", shipment_id=self.shipment),
            )
        context: dict[str, JsonValue] = {
            "goal": "geocode the delivery address",
            "has_postcode": self.has_postcode,
            "country": self.country,
            "requested_on": self.requested_on,
            "shipments": shipments,
        }
        return make_view(
            stage,
            context,
            tool_call("geocode_structured", shipment_id=self.shipment),
            tool_call("geocode_freeform", shipment_id=self.shipment),
        )

    def luck(self) -> float:
        """This step's draw in [0, 1): seeded by instance and step number, not by call history."""
        return random.Random(f"{self.family}:{self.seed}:noise:{self.steps}").random()

    def _judge(self, stage: str, call: Call) -> StepResult:
        missing = mismatch(call, "shipment_id", self.shipment, "shipment")
        if missing is not None:
            return missing
        if stage == "load":
            return ok("address loaded" + (" with postcode" if self.has_postcode else ""), latency_ms=30)
        draw = self.luck()
        right = "geocode_structured" if self.has_postcode else "geocode_freeform"
        if call.action == right:
            if draw < GEOCODER_NOISE:
                return fail("503 from the geocoder: busy, try again", latency_ms=900)
            return ok("coordinates found", latency_ms=220)
        if call.action == "geocode_structured":
            return fail("a structured lookup needs a postcode", latency_ms=60)
        if draw < WRONG_FREEFORM_SUCCESS:
            return ok("coordinates found", latency_ms=400)
        return fail("ambiguous: several streets of that name; add the postcode", latency_ms=400)

    def _next(self, stage: str, call: Call) -> str | None:
        return "geocode" if stage == "load" else None

    def oracle_steps(self) -> float:
        # Load, then retry the right lookup until it works: 1 / (1 - p) calls on average.
        return 1.0 + 1.0 / (1.0 - GEOCODER_NOISE)
