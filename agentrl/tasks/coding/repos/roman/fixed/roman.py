"""Roman numerals."""

NUMERALS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
            (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(number):
    """`number` (1 to 3999) in Roman numerals, with subtractive pairs: 1994 -> 'MCMXCIV'."""
    numerals = []
    for value, numeral in NUMERALS:
        count, number = divmod(number, value)
        numerals.append(numeral * count)
    return "".join(numerals)
