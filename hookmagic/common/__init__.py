"""The ground floor: helpers every other part of hookmagic may import, and which import nothing
of hookmagic above them (errors, formatting of numbers, bounded file reading)."""
