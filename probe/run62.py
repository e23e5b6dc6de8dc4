import runpy, pandas as pd
pd.set_option("display.width", 250); pd.set_option("display.max_columns", 30)
g = runpy.run_path("tutorials/deep_dives/62_cross_entropy_vocab_parallel.py", run_name="__main__")
print(g["table"].round(3).to_string())
print(g["measured"].round(3).to_string())
