"""The answer key of the roman task: the reference implementation the random cases are checked
against. It never enters the workspace; the sandbox hands it to the test process alone."""

THOUSANDS = ["", "M", "MM", "MMM"]
HUNDREDS = ["", "C", "CC", "CCC", "CD", "D", "DC", "DCC", "DCCC", "CM"]
TENS = ["", "X", "XX", "XXX", "XL", "L", "LX", "LXX", "LXXX", "XC"]
ONES = ["", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX"]


def to_roman(number):
    return THOUSANDS[number // 1000] + HUNDREDS[number // 100 % 10] + TENS[number // 10 % 10] + ONES[number % 10]
