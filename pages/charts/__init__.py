"""Chart builders: pure functions from data (DataFrames, planner records) to plotly Figures.

Conventions every chart follows: one colour per GPU from ``planner.palette``; a title with
units on every axis; the words "predicted" and "measured" in the legend of every trace that
shows either.
"""
