"""specwatch — Streamlit entry point (placeholder until the views land)."""

import streamlit as st

st.title("specwatch")
