"""Java's numeric conversions, so throttle times match a Kafka broker's to the millisecond.

Python's round() rounds half to even and floor(x + 0.5) is wrong near 0.5; Kafka uses
Math.round (ties toward +infinity) and then narrows the long to an int.
"""

from __future__ import annotations

import math

INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_LONG_MIN = -(2**63)


def java_round(x: float) -> int:
    """Java's Math.round(double): nearest long, ties toward +inf, NaN to 0, saturating."""
    if x != x:
        return 0
    if x >= 9.223372036854775807e18:
        return _LONG_MAX
    if x <= -9.223372036854775808e18:
        return _LONG_MIN
    floor = math.floor(x)
    return int(floor) + (1 if x - floor >= 0.5 else 0)  # x - floor(x) is exact in binary64


def saturate_int(value: int) -> int:
    """A throttle time as the int32 field it is sent in; Kafka caps at Integer.MAX_VALUE."""
    return INT_MAX if value > INT_MAX else value
