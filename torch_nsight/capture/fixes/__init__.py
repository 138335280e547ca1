"""``--verify``'s fixes switched on in the user's script: the switches, their toggles
between steps, the padded ``Linear``."""
