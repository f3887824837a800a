"""Tests of xtag.service.routes: admin, Annif, feedback, explanations and batch optimisation."""
