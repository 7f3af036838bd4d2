"""Roman numerals."""

NUMERALS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]


def to_roman(number):
    """`number` (1 to 3999) in Roman numerals, with subtractive pairs: 1994 -> 'MCMXCIV'."""
    numerals = []
    for value, numeral in NUMERALS:
        count, number = divmod(number, value)
        numerals.append(numeral * count)
    return "".join(numerals)
