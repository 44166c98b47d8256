# placeholder until the probe lands
